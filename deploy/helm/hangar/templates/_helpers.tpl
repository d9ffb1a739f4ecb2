{{/* Names, labels and small decisions shared by the templates. */}}

{{- define "hangar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hangar.fullname" -}}
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

{{- define "hangar.webhookServerName" -}}
{{- printf "%s-webhook-server" (include "hangar.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hangar.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hangar.labels" -}}
helm.sh/chart: {{ include "hangar.chart" . }}
app.kubernetes.io/name: {{ include "hangar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "hangar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hangar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "hangar.webhookServerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "hangar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: github-webhook-server
{{- end }}

{{- define "hangar.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hangar.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "hangar.webhookServerServiceAccountName" -}}
{{- if .Values.githubWebhookServer.serviceAccount.create }}
{{- default (include "hangar.webhookServerName" .) .Values.githubWebhookServer.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.githubWebhookServer.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The namespace the controllers watch; empty means all namespaces. */}}
{{- define "hangar.watchNamespace" -}}
{{- if .Values.scope.singleNamespace }}
{{- default .Release.Namespace .Values.scope.watchNamespace }}
{{- end }}
{{- end }}

{{/* "true" when the controller replicas elect a leader: always with more than one. */}}
{{- define "hangar.leaderElection" -}}
{{- if or .Values.enableLeaderElection (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- end }}

{{- define "hangar.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The GitHub credentials from authSecret, as secretKeyRefs (never literal values). */}}
{{- define "hangar.githubCredentialsEnv" -}}
{{- range $env, $key := dict "GITHUB_TOKEN" "github_token" "GITHUB_APP_ID" "github_app_id" "GITHUB_APP_INSTALLATION_ID" "github_app_installation_id" "GITHUB_APP_PRIVATE_KEY" "github_app_private_key" }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.authSecret.name }}
      key: {{ $key }}
      optional: true
{{- end }}
{{- end }}

{{/* GitHub endpoint settings shared by the controller and the webhook server. */}}
{{- define "hangar.githubURLEnv" -}}
{{- with .Values.githubURL }}
- name: GITHUB_URL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.githubEnterpriseServerURL }}
- name: GITHUB_ENTERPRISE_URL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.githubAPIURL }}
- name: GITHUB_API_URL
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/* Admission webhooks: the Service the apiserver calls, the two configurations whose
caBundle the controller patches, and the Secret holding its CA and serving certificate.
Configurations are cluster-scoped: the namespace in their names keeps releases apart. */}}
{{- define "hangar.admissionServiceName" -}}
{{- printf "%s-webhook" (include "hangar.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hangar.mutatingWebhookConfiguration" -}}
{{- printf "%s-%s-mutating-webhook-configuration" (include "hangar.fullname" .) .Release.Namespace }}
{{- end }}

{{- define "hangar.validatingWebhookConfiguration" -}}
{{- printf "%s-%s-validating-webhook-configuration" (include "hangar.fullname" .) .Release.Namespace }}
{{- end }}

{{- define "hangar.webhookTLSSecret" -}}
{{- printf "%s-webhook-tls" (include "hangar.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
