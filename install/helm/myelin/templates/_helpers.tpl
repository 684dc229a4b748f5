{{/* The image reference: tag "" means the chart's appVersion. */}}
{{- define "myelin.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* A node-local path: with perNodePaths the node's name is appended (the downward
API's NODE_NAME, expanded by the kubelet in the container's args). */}}
{{- define "myelin.nodePath" -}}
{{- if .root.Values.perNodePaths -}}{{ .path }}/$(NODE_NAME){{- else -}}{{ .path }}{{- end -}}
{{- end -}}

{{- define "myelin.labels" -}}
app.kubernetes.io/name: myelin
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "myelin.selectorLabels" -}}
app.kubernetes.io/name: myelin
k8s-app: myelin
{{- end -}}

{{/* myelin reads its ConfigMap and Role from kube-system (internal/config), and its
cluster-scoped objects have fixed names: one install per cluster, in kube-system. */}}
{{- define "myelin.checkNamespace" -}}
{{- if ne .Release.Namespace "kube-system" -}}
{{- fail (printf "myelin must be installed in namespace kube-system (got %q): the agent reads kube-system/myelin-config, and one install serves the whole cluster; run helm install with --namespace kube-system" .Release.Namespace) -}}
{{- end -}}
{{- end -}}
