{{- define "gpushare.labels" -}}
app.kubernetes.io/name: gpushare-webhook
app.kubernetes.io/component: {{ . }}
{{- end }}

{{- define "gpushare.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{/* The matchConditions of webhook .name: generated from the rules (files/match-conditions.yaml, from
`gpushare policy export --webhooks helm`), or the release's own when its config changes a name they
test (resource and node-label names, the exemption annotation, the GPU-sharing DaemonSets, the
near-miss settings): Helm cannot derive them. */}}
{{- define "gpushare.matchConditions" -}}
{{- $config := .root.Values.config | default dict -}}
{{- $names := get $config "names" | default dict -}}
{{- $custom := .root.Values.matchConditions -}}
{{- $tested := or (get $names "resources") (get $names "labels") (get $names "exempt_annotation") (get $names "gpushare_daemonsets") (get $config "near_miss") (get $config "workloads") -}}
{{- if and (not $custom) $tested -}}
{{- fail "config changes names the webhooks' matchConditions test (names.resources, names.labels, names.exempt_annotation, names.gpushare_daemonsets, near_miss or workloads), so they must be generated for it: run `gpushare policy export --webhooks helm --config <that config>` and pass its output with -f (see docs/install.md)" -}}
{{- end -}}
{{- $all := $custom | default (.root.Files.Get "files/match-conditions.yaml" | fromYaml).matchConditions -}}
{{- $found := index $all .name -}}
{{- if not $found -}}
{{- fail (printf "matchConditions has no entry for the webhook %s; regenerate them with `gpushare policy export --webhooks helm`" .name) -}}
{{- end -}}
{{- toYaml $found -}}
{{- end }}

{{/* The custom workloads' webhook rules: the kinds .Values.customWorkloads.kinds names (all when empty),
as the generated customWorkloadKinds describe them (files/match-conditions.yaml, or the release's own). */}}
{{- define "gpushare.customWorkloadRules" -}}
{{- $known := .Values.customWorkloadKinds | default (.Files.Get "files/match-conditions.yaml" | fromYaml).customWorkloadKinds -}}
{{- $wanted := .Values.customWorkloads.kinds | default list -}}
{{- $names := list -}}
{{- range $known }}{{ $names = append $names .name }}{{ end -}}
{{- range $wanted }}
{{- if not (has . $names) }}
{{- fail (printf "customWorkloads.kinds names %s, which the workload table does not hold (kind.group, e.g. PyTorchJob.kubeflow.org; a kind of your own goes in config.workloads.kinds, then `gpushare policy export --webhooks helm --config <that config>`, passed with -f)" .) }}
{{- end }}
{{- end }}
{{- range $known }}
{{- if or (not $wanted) (has .name $wanted) }}
- apiGroups: [{{ .group | quote }}]
  apiVersions: {{ toJson .versions }}
  operations: [CREATE, UPDATE]
  resources: [{{ .resource }}]
  scope: {{ .scope }}
{{- end }}
{{- end }}
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

{{/* podLabels, refused where they would change the labels the Deployment's selector and the
Services match. */}}
{{- define "gpushare.podLabels" -}}
{{- range $name, $value := .Values.podLabels }}
{{- if has $name (list "app.kubernetes.io/name" "app.kubernetes.io/component") }}
{{- fail (printf "podLabels sets %s, which the chart's selectors use; choose another label" $name) }}
{{- end }}
{{- end }}
{{- with .Values.podLabels }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/* Where every pod of the chart runs and what it pulls with (the webhook, the certificate Job and
CronJob: a system node pool or a private registry concerns them all). */}}
{{- define "gpushare.podPlacement" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 0 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
{{- toYaml . | nindent 0 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "gpushare.certsPod" -}}
metadata:
  labels:
    {{- include "gpushare.labels" "certificates" | nindent 4 }}
    {{- with include "gpushare.podLabels" . | trim }}{{ . | nindent 4 }}{{ end }}
  {{- with .Values.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: gpushare-webhook-certs
  restartPolicy: Never
  {{- with include "gpushare.podPlacement" . | trim }}{{ . | nindent 2 }}{{ end }}
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

{{/* Who may call what (docs/deploy.md, "Who can reach what"): environment, so that a
replaced config file keeps it. Text equal to the kustomize base's at the defaults. */}}
{{- define "gpushare.isolationEnv" -}}
- {name: GPUSHARE_SERVER__OPS_PORT, value: {{ .Values.ops.port | toString | quote }}}
- {name: GPUSHARE_SERVER__PROBE_PORT, value: "8081"}
- {name: GPUSHARE_AUTH__BEARER_TOKEN_FILE, value: /etc/gpushare/token/token}
- {name: GPUSHARE_AUTH__BEARER_PATHS, value: '["/dry-run", "/explain", "/metrics"]'}
- {name: GPUSHARE_AUTH__BEARER_TOKEN_OPTIONAL, value: "true"}
- {name: GPUSHARE_AUTH__CLIENT_CA_FILE, value: /etc/gpushare/tls/ca.crt}
- {name: GPUSHARE_AUTH__CLIENT_NAMES, value: {{ .Values.extender.clientNames | toJson | squote }}}
- {name: GPUSHARE_AUTH__CLIENT_CERT_PATHS, value: '["/scheduler/filter", "/scheduler/prioritize"]'}
{{- end }}

{{- define "gpushare.networkPolicy" -}}
# Ingress to the webhook pods by port: NetworkPolicy sees addresses and ports, never paths.
# Traffic from the pod's own node (kubelet probes) is always allowed.
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: gpushare-webhook
  namespace: {{ .namespace }}
  labels:
    {{- include "gpushare.labels" "webhook" | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "gpushare.labels" "webhook" | nindent 6 }}
  policyTypes: [Ingress]
  ingress:
  # The admission port: the API server (and kube-scheduler), by address.
  - ports:
    - {port: https, protocol: TCP}
    from:
      {{- toYaml .admissionFrom | nindent 6 }}
  # The ops port: Prometheus and whoever runs /dry-run or /explain.
  {{- if .opsFrom }}
  - ports:
    - {port: ops, protocol: TCP}
    from:
      {{- toYaml .opsFrom | nindent 6 }}
  {{- end }}
{{- end }}
