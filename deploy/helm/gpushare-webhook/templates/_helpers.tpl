{{- define "gpushare.labels" -}}
app.kubernetes.io/name: gpushare-webhook
app.kubernetes.io/component: {{ . }}
{{- end }}

{{- define "gpushare.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{/* CEL: container c requests a shared GPU resource (limits or requests). */}}
{{- define "gpushare.containerSharesGPU" -}}
{{- $mem := .Values.gpushare.resources.gpuMem -}}
{{- $core := .Values.gpushare.resources.gpuCore -}}
has(c.resources) && ((has(c.resources.limits) && ('{{ $mem }}' in c.resources.limits || '{{ $core }}' in c.resources.limits)) || (has(c.resources.requests) && ('{{ $mem }}' in c.resources.requests || '{{ $core }}' in c.resources.requests)))
{{- end }}

{{/* CEL: a pod spec at path .spec has a container or init container that shares a GPU. */}}
{{- define "gpushare.specSharesGPU" -}}
{{- $c := include "gpushare.containerSharesGPU" .root -}}
{{ .spec }}.containers.exists(c, {{ $c }}) || (has({{ .spec }}.initContainers) && {{ .spec }}.initContainers.exists(c, {{ $c }}))
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
