{{/* The console's own labels: its pods never match the operator's selector. */}}
{{- define "ferrymq-operator.consoleSelectorLabels" -}}
app.kubernetes.io/name: ferrymq-console
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ferrymq-operator.consoleLabels" -}}
{{ include "ferrymq-operator.consoleSelectorLabels" . }}
app.kubernetes.io/component: console
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ferrymq
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
