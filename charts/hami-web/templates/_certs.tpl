{{/* The pod of the certificate Job and CronJob: `hami-web certs` with the chart's names. */}}
{{- define "hami-web.certsPod" -}}
metadata:
  labels:
    {{- include "hami-web.labels" . | nindent 4 }}
    app.kubernetes.io/component: certs
    hami.io/webhook: ignore
spec:
  serviceAccountName: {{ include "hami-web.fullname" . }}-certs
  restartPolicy: OnFailure
  {{- with include "hami-web.pullSecrets" (dict "global" .Values.global "secrets" .Values.scheduler.extender.image.pullSecrets) }}{{ . | nindent 2 }}{{ end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    runAsGroup: 10001
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: certs
      image: {{ include "hami-web.serverImage" . }}
      imagePullPolicy: {{ .Values.scheduler.extender.image.pullPolicy }}
      args:
        {{- include "hami-web.certsArgs" . | nindent 8 }}
      resources:
        {{- toYaml .Values.certs.resources | nindent 8 }}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        runAsNonRoot: true
        capabilities:
          drop: ["ALL"]
{{- end -}}
