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

{{/* The namespaced rules: everything the operator reads and writes for a Broker, and for
     ConsumerGroups' Spark jobs (rbac.sparkJobs). Kubernetes lets a subject create a Role, and
     bind it, only with permissions the subject holds itself: so the operator holds what the
     Spark driver's Role grants (ferrymq_spark.k8s_cronjob.DRIVER_RULES: executor pods and
     their ConfigMap; PVCs only with rbac.sparkJobVolumes) rather than `escalate`/`bind`,
     which would let it grant anything. */}}
{{- define "ferrymq-operator.namespacedRules" -}}
- apiGroups: [ferrymq.io]
  resources: [brokers, topics, consumergroups, users]
  verbs: [get, list, watch, patch, update]
- apiGroups: [ferrymq.io]
  resources: [brokers/status, topics/status, consumergroups/status, users/status]
  verbs: [get, patch, update]
# blockOwnerDeletion on the objects a Broker, Topic, ConsumerGroup or User owns (OwnerReferencesPermissionEnforcement).
- apiGroups: [ferrymq.io]
  resources: [brokers/finalizers, topics/finalizers, consumergroups/finalizers, users/finalizers]
  verbs: [update]
# ACL: users' credentials, the operator's own account, the brokers' plain_acl.yml.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, create, patch]
# Broker.spec.tls.issuerRef: the Certificate cert-manager turns into the brokers' TLS Secret.
- apiGroups: [cert-manager.io]
  resources: [certificates]
  verbs: [get, create, patch]
# delete: the slave sets (StatefulSet, headless Service, PDB) a lowered
# spec.replication.slavesPerGroup no longer wants.
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [get, create, patch, delete]
# The failover controllers (Broker.spec.replication.failover) keep their state in a ConfigMap
# and elect a leader through a Lease: the operator creates their ServiceAccount, Role and
# RoleBinding, so it holds what that Role grants (manifests.CONTROLLER_RULES).
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update]
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, create, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, patch, delete]
# Broker.spec.storage.size raised: the brokers' claims are expanded (never created or deleted here).
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, list, patch]
{{- if .Values.rbac.sparkJobs }}
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, update, patch, delete, deletecollection]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete, deletecollection]
{{- if .Values.rbac.sparkJobVolumes }}
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, list, watch, create, delete, deletecollection]
{{- end }}
- apiGroups: [batch]
  resources: [cronjobs]
  verbs: [get, create, patch, delete]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list]
{{- else }}
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, update, patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, delete]
{{- end }}
# list/delete: the per-set PDBs replaced by per-group ones, and groups a scale-down removed.
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, create, patch, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}
