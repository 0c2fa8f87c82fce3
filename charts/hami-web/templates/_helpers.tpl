{{/*
Names, labels and images shared by the templates. Names follow HAMi's chart helpers: <fullname> is the release
name when it contains the chart's name (release "hami-web" gives "hami-web"), else "<release>-hami-web".
*/}}
{{- define "hami-web.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hami-web.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "hami-web.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* Labels of every object; "component" is added by the caller where the object has one. */}}
{{- define "hami-web.labels" -}}
app.kubernetes.io/name: {{ include "hami-web.name" . }}
{{- with .Values.global.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The labels that select the scheduler pods (Deployment, Service, PDB, anti-affinity). */}}
{{- define "hami-web.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hami-web.name" . }}
app.kubernetes.io/component: scheduler
{{- end -}}

{{/* registry/repository:tag; global.imageRegistry wins over the image's own registry (HAMi's rule). */}}
{{- define "hami-web.image" -}}
{{- $registry := .global.imageRegistry | default .image.registry -}}
{{- $tag := .image.tag | default .defaultTag | toString -}}
{{- if $registry -}}
{{- printf "%s/%s:%s" $registry .image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "hami-web.serverImage" -}}
{{- include "hami-web.image" (dict "image" .Values.scheduler.extender.image "global" .Values.global "defaultTag" .Chart.AppVersion) -}}
{{- end -}}

{{- define "hami-web.kubeSchedulerImage" -}}
{{- $clusterVersion := regexReplaceAll "^(v[0-9]+\\.[0-9]+\\.[0-9]+).*$" .Capabilities.KubeVersion.Version "${1}" -}}
{{- include "hami-web.image" (dict "image" .Values.scheduler.kubeScheduler.image "global" .Values.global "defaultTag" $clusterVersion) -}}
{{- end -}}

{{/* imagePullSecrets of a pod: the global ones, then the image's own, each once. */}}
{{- define "hami-web.pullSecrets" -}}
{{- $names := list -}}
{{- range concat .global.imagePullSecrets .secrets -}}
{{- $names = append $names (kindIs "map" . | ternary (get . "name") .) -}}
{{- end -}}
{{- with ($names | uniq) }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* Names fixed by schedulerName: kube-scheduler's identity, its token, its configuration and its Lease. */}}
{{- define "hami-web.schedulerConfigName" -}}
{{- printf "%s-config" .Values.schedulerName -}}
{{- end -}}

{{- define "hami-web.schedulerTokenName" -}}
{{- printf "%s-token" .Values.schedulerName -}}
{{- end -}}

{{/* The Deployment's replicas: scheduler.replicas with leader election, else one (HAMi's rule). */}}
{{- define "hami-web.replicas" -}}
{{- if .Values.scheduler.leaderElect -}}
{{- .Values.scheduler.replicas -}}
{{- else -}}
1
{{- end -}}
{{- end -}}

{{/* Port of scheduler.metricsBindAddress (":9395" or "0.0.0.0:9395"). */}}
{{- define "hami-web.metricsPort" -}}
{{- last (splitList ":" .Values.scheduler.metricsBindAddress) | int -}}
{{- end -}}

{{/* The certificate command's arguments, shared by the Job and the CronJob. */}}
{{- define "hami-web.certsArgs" -}}
- certs
- --in-cluster
- --service={{ include "hami-web.fullname" . }}
- --namespace={{ include "hami-web.namespace" . }}
- --secret={{ include "hami-web.fullname" . }}-tls
- --ca-secret={{ include "hami-web.fullname" . }}-ca
- --webhook-config={{ if .Values.scheduler.admissionWebhook.enabled }}{{ include "hami-web.fullname" . }}{{ end }}
{{- end -}}
