{{- define "ferrymq-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ferrymq-operator.labels" -}}
app.kubernetes.io/name: ferrymq-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ferrymq
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "ferrymq-operator.selectorLabels" -}}
app.kubernetes.io/name: ferrymq-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ferrymq-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ferrymq-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespaced rules: everything the operator reads and writes for a Broker. */}}
{{- define "ferrymq-operator.namespacedRules" -}}
- apiGroups: [ferrymq.io]
  resources: [brokers, topics, consumergroups]
  verbs: [get, list, watch, patch, update]
- apiGroups: [ferrymq.io]
  resources: [brokers/status, topics/status, consumergroups/status]
  verbs: [get, patch, update]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [configmaps, services]
  verbs: [get, create, patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}
