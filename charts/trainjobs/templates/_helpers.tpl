{{/* Chart name, truncated to 63 characters (DNS-1123 label). */}}
{{- define "trainjobs.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of every resource: fullnameOverride, else RELEASE-NAME (or RELEASE when the release
name already contains the chart name), truncated to 63 characters.
*/}}
{{- define "trainjobs.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "trainjobs.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the operator pods (never change them: Deployment selectors are immutable). */}}
{{- define "trainjobs.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainjobs.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The standard labels but the component (the helm test pod has its own). */}}
{{- define "trainjobs.commonLabels" -}}
helm.sh/chart: {{ include "trainjobs.chart" . }}
app.kubernetes.io/name: {{ include "trainjobs.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: trainjobs
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The standard labels, on every object of the operator. */}}
{{- define "trainjobs.labels" -}}
{{ include "trainjobs.commonLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "trainjobs.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trainjobs.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "trainjobs.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Leader election is on when asked for, and always with more than one replica. */}}
{{- define "trainjobs.leaderElect" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- end }}

{{- define "trainjobs.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace }}
{{- end }}

{{- define "trainjobs.leaseName" -}}
{{- default (include "trainjobs.fullname" .) .Values.leaderElection.id }}
{{- end }}

{{/* The metrics Service's name: a DNS-1035 label, so at most 63 characters. */}}
{{- define "trainjobs.metricsServiceName" -}}
{{- printf "%s-metrics" (include "trainjobs.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{- define "trainjobs.configPath" -}}/etc/trainjobs/controller-config.yaml{{- end }}

{{/*
The API permissions the operator uses, and nothing else (see docs/helm.md, "RBAC"):
  jobs            list, watch   informers (trainjobs/operator/informer.py)
                  delete        ttlSecondsAfterFinished (controller._act)
  jobs/status     patch         merge-patch of status (kube.merge_patch_status)
  jobs/finalizers update        the pods/Services it creates carry ownerReferences with
                                blockOwnerDeletion: true, which clusters running the
                                OwnerReferencesPermissionEnforcement admission plugin allow only
                                to who may update the owner's finalizers
  pods, services  list, watch   informers, label-selected (trainjobs.io/job-name)
                  create,delete replicas, headless Services, managed Redis; restarts/cleanup
                  get           who controls an object whose create answered 409
                                (controller._check_owner)
  deployments     create, get   TensorBoard (TfJob spec.tensorboard); get as above
  events          create        Kubernetes Events on jobs (events.py)
*/}}
{{- define "trainjobs.rules" -}}
{{- $jobs := concat (list "mxjobs" "tfjobs" "caffe2jobs") .Values.rbac.extraJobResources | uniq -}}
- apiGroups: ["trainjobs.io"]
  resources: {{ toJson $jobs }}
  verbs: ["list", "watch", "delete"]
- apiGroups: ["trainjobs.io"]
  resources:
  {{- range $jobs }}
  - {{ . }}/status
  {{- end }}
  verbs: ["patch"]
- apiGroups: ["trainjobs.io"]
  resources:
  {{- range $jobs }}
  - {{ . }}/finalizers
  {{- end }}
  verbs: ["update"]
{{- if .Values.kubeflow.enabled }}
- apiGroups: ["kubeflow.org"]
  resources: ["tfjobs", "mxjobs"]
  verbs: ["list", "watch", "delete"]
- apiGroups: ["kubeflow.org"]
  resources: ["tfjobs/status", "mxjobs/status"]
  verbs: ["patch"]
- apiGroups: ["kubeflow.org"]
  resources: ["tfjobs/finalizers", "mxjobs/finalizers"]
  verbs: ["update"]
{{- end }}
{{- if .Values.multiKueue.manager }}
{{- /* A MultiKueue manager runs no job: it watches what jobs own, never creates or deletes. */}}
- apiGroups: [""]
  resources: ["pods", "services"]
  verbs: ["list", "watch", "get"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["list", "watch", "get"]
{{- else }}
- apiGroups: [""]
  resources: ["pods", "services"]
  verbs: ["list", "watch", "get", "create", "delete"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["list", "watch", "get", "create"]
{{- end }}
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- if .Values.kueue.enabled }}
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["list", "watch", "create", "patch", "delete"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["patch"]
{{- end }}
{{- $gang := (.Values.controllerConfig.gangScheduling | default dict).scheduler | default "none" }}
{{- $podgroups := ternary (list "list" "watch") (list "list" "watch" "create" "delete") .Values.multiKueue.manager }}
{{- if eq $gang "coscheduling" }}
- apiGroups: ["scheduling.x-k8s.io"]
  resources: ["podgroups"]
  verbs: {{ toJson $podgroups }}
{{- else if eq $gang "volcano" }}
- apiGroups: ["scheduling.volcano.sh"]
  resources: ["podgroups"]
  verbs: {{ toJson $podgroups }}
{{- end }}
{{- end }}

{{/* Values that JSON schema cannot check. */}}
{{- define "trainjobs.validate" -}}
{{- $le := .Values.leaderElection }}
{{- if not (lt (float64 $le.renewDeadline) (float64 $le.leaseDuration)) }}
{{- fail (printf "leaderElection.renewDeadline (%v) must be less than leaderElection.leaseDuration (%v)" $le.renewDeadline $le.leaseDuration) }}
{{- end }}
{{- if not (lt (float64 $le.retryPeriod) (float64 $le.renewDeadline)) }}
{{- fail (printf "leaderElection.retryPeriod (%v) must be less than leaderElection.renewDeadline (%v)" $le.retryPeriod $le.renewDeadline) }}
{{- end }}
{{- if and .Values.multiKueue.manager (not .Values.kueue.enabled) }}
{{- fail "multiKueue.manager needs kueue.enabled=true: in a MultiKueue manager the operator's only work is the Kueue Workloads of jobs managed by kueue.x-k8s.io/multikueue" }}
{{- end }}
{{- $pdb := .Values.podDisruptionBudget }}
{{- if and $pdb.enabled (not (kindIs "invalid" $pdb.minAvailable)) (not (kindIs "invalid" $pdb.maxUnavailable)) }}
{{- fail "podDisruptionBudget: set only one of minAvailable and maxUnavailable (set the other to null)" }}
{{- end }}
{{- if and $pdb.enabled (kindIs "invalid" $pdb.minAvailable) (kindIs "invalid" $pdb.maxUnavailable) }}
{{- fail "podDisruptionBudget: set one of minAvailable and maxUnavailable" }}
{{- end }}
{{- end }}

{{/* The progress endpoint's Service (a DNS-1035 label) and its chart-made TLS Secret. */}}
{{- define "trainjobs.progressServiceName" -}}
{{- printf "%s-progress" (include "trainjobs.fullname" . | trunc 54 | trimSuffix "-") }}
{{- end }}

{{- define "trainjobs.progressSecretName" -}}
{{- default (printf "%s-tls" (include "trainjobs.progressServiceName" .)) .Values.progress.tls.secretName }}
{{- end }}

{{- define "trainjobs.progressTlsDir" -}}/etc/trainjobs/progress-tls{{- end }}
