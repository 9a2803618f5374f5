{{/* Names and labels shared by the templates. */}}

{{- define "gantry.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's base name: the release name, or "gantry" inside it when absent. */}}
{{- define "gantry.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gantry.scheduler.fullname" -}}
{{- printf "%s-scheduler" (include "gantry.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gantry.nodeAgent.fullname" -}}
{{- printf "%s-node-agent" (include "gantry.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gantry.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "gantry.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gantry
{{- end -}}

{{/* Selector labels of one component; call with (dict "ctx" $ "component" "scheduler"). */}}
{{- define "gantry.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gantry.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gantry.componentLabels" -}}
{{ include "gantry.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* image reference; call with (dict "ctx" $ "image" .Values.scheduler.image). */}}
{{- define "gantry.image" -}}
{{- $tag := .ctx.Values.image.tag | default .ctx.Chart.AppVersion -}}
{{- if .ctx.Values.image.registry -}}
{{- printf "%s/%s:%s" .ctx.Values.image.registry .image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* The webhook Service, its TLS Secret (and cert-manager Certificate), and the webhook configurations. */}}
{{- define "gantry.webhook.service" -}}
{{- printf "%s-webhook" (include "gantry.scheduler.fullname" .) -}}
{{- end -}}

{{- define "gantry.webhook.secret" -}}
{{- printf "%s-webhook-tls" (include "gantry.scheduler.fullname" .) -}}
{{- end -}}

{{- define "gantry.webhook.queues" -}}
{{- printf "%s-queues" (include "gantry.scheduler.fullname" .) -}}
{{- end -}}

{{- define "gantry.webhook.pods" -}}
{{- printf "%s-pods" (include "gantry.scheduler.fullname" .) -}}
{{- end -}}

{{/* The schedulerNames the scheduler serves: scheduler.schedulerNames, plus kai-scheduler when scheduler.serveKaiSchedulerPods. */}}
{{- define "gantry.schedulerNames" -}}
{{- $names := .Values.scheduler.schedulerNames | default list -}}
{{- if and .Values.scheduler.serveKaiSchedulerPods (not (has "kai-scheduler" $names)) -}}
{{- $names = append $names "kai-scheduler" -}}
{{- end -}}
{{- toJson $names -}}
{{- end -}}

{{/* "true" when the pod webhook turns gantry.dev/gpu-memory and gpu-fraction annotations into DRA claims: webhooks.annotationShareClaims, or, when it is null, nodeAgent.enabled (only the node agent prepares those claims). */}}
{{- define "gantry.annotationShareClaims" -}}
{{- $on := .Values.webhooks.annotationShareClaims -}}
{{- if kindIs "invalid" $on -}}
{{- $on = .Values.nodeAgent.enabled -}}
{{- end -}}
{{- if and .Values.scheduler.enabled .Values.webhooks.enabled $on -}}true{{- end -}}
{{- end -}}

{{/* "true" when the node agent writes claim statuses: nodeAgent.claimStatus, and only together with the policy that keeps each agent to the claims allocated on its own node (nodeScopedWrites). */}}
{{- define "gantry.nodeAgent.claimStatus" -}}
{{- if and .Values.nodeAgent.enabled .Values.nodeAgent.claimStatus .Values.nodeAgent.nodeScopedWrites -}}true{{- end -}}
{{- end -}}
