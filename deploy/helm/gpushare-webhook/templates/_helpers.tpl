{{- define "gpushare.labels" -}}
app.kubernetes.io/name: gpushare-webhook
app.kubernetes.io/component: {{ . }}
{{- end }}

{{- define "gpushare.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{/* CEL: resource key k is a shared-GPU name, or (with .nearMiss) could be a near miss of one:
under a look-alike domain and containing "gpu", but not a real whole-GPU resource (GS007). */}}
{{- define "gpushare.sharedKey" -}}
{{- $r := .root.Values.gpushare.resources -}}
{{- if .nearMiss -}}
k == '{{ $r.gpuMem }}' || k == '{{ $r.gpuCore }}' || (k.matches('{{ .root.Values.gpushare.nearMiss.pattern }}') && !(k in {{ include "gpushare.quotedList" .root.Values.gpushare.nearMiss.notSent }}))
{{- else -}}
k == '{{ $r.gpuMem }}' || k == '{{ $r.gpuCore }}'
{{- end -}}
{{- end }}

{{/* CEL: container c names such a resource in its limits or requests. */}}
{{- define "gpushare.containerSharesGPU" -}}
{{- $k := include "gpushare.sharedKey" . -}}
has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, {{ $k }})) || (has(c.resources.requests) && c.resources.requests.exists(k, {{ $k }})))
{{- end }}

{{/* CEL: a pod spec at path .spec has a container or init container that shares a GPU. */}}
{{- define "gpushare.specSharesGPU" -}}
{{- $c := include "gpushare.containerSharesGPU" . -}}
{{ .spec }}.containers.exists(c, {{ $c }}) || (has({{ .spec }}.initContainers) && {{ .spec }}.initContainers.exists(c, {{ $c }}))
{{- end }}

{{/* CEL list literal of strings. */}}
{{- define "gpushare.quotedList" -}}
{{- $names := list -}}
{{- range . }}{{ $names = append $names (printf "'%s'" .) }}{{ end -}}
[{{ join ", " $names }}]
{{- end }}

{{/* CEL list literal of the GPU-sharing DaemonSet names. */}}
{{- define "gpushare.daemonSetList" -}}
{{- $names := list -}}
{{- range .Values.gpushare.daemonSets }}{{ $names = append $names (printf "'%s'" .) }}{{ end -}}
[{{ join ", " $names }}]
{{- end }}

{{- define "gpushare.namespaceSelector" -}}
matchExpressions:
- key: kubernetes.io/metadata.name
  operator: NotIn
  values: {{ concat .Values.webhooks.excludedNamespaces (list .Release.Namespace) | uniq | toJson }}
{{- end }}

{{- define "gpushare.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "gpushare.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
{{- end }}

{{- define "gpushare.certsPod" -}}
metadata:
  labels:
    {{- include "gpushare.labels" "certificates" | nindent 4 }}
spec:
  serviceAccountName: gpushare-webhook-certs
  restartPolicy: Never
  securityContext:
    {{- include "gpushare.podSecurityContext" . | nindent 4 }}
  containers:
  - name: certs
    image: {{ include "gpushare.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    command: [gpushare]
    args: [certs, rotate, --secrets, --inject]
    env:
    - name: GPUSHARE_CERTS__NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    resources:
      {{- toYaml .Values.certificates.resources | nindent 6 }}
    securityContext:
      {{- include "gpushare.containerSecurityContext" . | nindent 6 }}
{{- end }}
