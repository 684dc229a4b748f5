{{/* The image reference: tag "" means the chart's appVersion. A repository without a
registry host (its first path part has no "." or ":" and is not localhost) is pulled
from Docker Hub by containerd: whoever holds that name there would run the agent, with
its capabilities, on every node that lacks the image. Such a name must not be pulled. */}}
{{- define "myelin.image" -}}
{{- $first := index (splitList "/" .Values.image.repository) 0 -}}
{{- $host := or (contains "." $first) (contains ":" $first) (eq $first "localhost") -}}
{{- if and (not $host) (ne .Values.image.pullPolicy "Never") -}}
{{- fail (printf "image.repository %q names no registry host, so a node without the image would pull it from Docker Hub: import the image on every node (myelin images build, then ctr -n k8s.io images import) and keep image.pullPolicy=Never, or push it to your registry and set image.repository to registry.host/path" .Values.image.repository) -}}
{{- end -}}
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

{{/* What a container that writes to the node (pins under bpf.root, CNI files) needs
besides capabilities: the runtime's default AppArmor profile denies mount and writes
under /sys/fs/*, and SELinux's container_t denies writing the node's files; so these
containers run unconfined by AppArmor and as spc_t (super-privileged container), as
Cilium's agent does. A node without AppArmor or SELinux ignores both. */}}
{{- define "myelin.hostAccessConfinement" -}}
appArmorProfile:
  type: Unconfined
seLinuxOptions:
  type: spc_t
  level: s0
{{- if not .Values.securityContext.privileged }}
seccompProfile:
  type: {{ .Values.securityContext.seccompProfile | quote }}
{{- end }}
{{- end -}}

{{/* Where a cleanup pod says that its node is clean (an emptyDir): its readiness
probe tests this file, so kubectl rollout status ds/myelin returns only when every
node is clean (helm's --wait does not wait for them with maxUnavailable 100%). */}}
{{- define "myelin.cleanupDoneFile" -}}/run/myelin-cleanup/done{{- end -}}

{{/* extraEnv may not set what the agent container's env already sets: a second entry
of one name would silently win or lose depending on its place. */}}
{{- define "myelin.checkExtraEnv" -}}
{{- $own := dict "NODE_NAME" "the Pod's spec.nodeName" "MYELIN_STATE_DIR" "runPath" "KUBERNETES_SERVICE_HOST" "k8sServiceHost" "KUBERNETES_SERVICE_PORT" "k8sServicePort" -}}
{{- range .Values.extraEnv -}}
{{- $name := .name -}}
{{- with get $own $name -}}
{{- fail (printf "extraEnv: the chart sets %s itself (from %s); remove it from extraEnv" $name .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* podLabels may not set the labels the pods' selectors match (the agent's, the relay's
and the UI's): the pod template would no longer match its selector. */}}
{{- define "myelin.checkPodLabels" -}}
{{- range $name := list "app.kubernetes.io/name" "k8s-app" -}}
{{- if hasKey $.Values.podLabels $name -}}
{{- fail (printf "podLabels.%s: the chart sets this label itself (the pods' selector matches it); remove it from podLabels" $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The agents' Hubble TCP address (hubble-listen-address): hubble.listenAddress, or
":4244" when it is empty and a relay reads the port or TLS protects it; "" (no port,
only the node's socket) otherwise. */}}
{{- define "myelin.hubbleListenAddress" -}}
{{- $h := .Values.hubble -}}
{{- if $h.listenAddress }}{{ $h.listenAddress }}{{ else if or $h.relay.enabled $h.tls.enabled }}:4244{{ end }}
{{- end -}}

{{/* The Secret with one role's Hubble TLS files (ca.crt, tls.crt, tls.key), from a
dict with the chart's context (ctx) and the role ("agent", "relay" or "ui"):
hubble.tls.secretName for every role (one pair); else the user's per-role Secret of
hubble.tls.roleSecrets; else the role's own one the chart generates
(hubble-tls-secret.yaml): myelin-hubble-tls (the agents'; its name from before the
per-role Secrets), myelin-hubble-relay-tls, myelin-hubble-ui-tls. */}}
{{- define "myelin.hubbleTLSSecret" -}}
{{- if .ctx.Values.hubble.tls.secretName -}}
{{ .ctx.Values.hubble.tls.secretName }}
{{- else if .ctx.Values.hubble.tls.roleSecrets.agent -}}
{{ get .ctx.Values.hubble.tls.roleSecrets .role }}
{{- else if eq .role "agent" -}}
myelin-hubble-tls
{{- else -}}
myelin-hubble-{{ .role }}-tls
{{- end -}}
{{- end -}}

{{/* The names of the relay's and the UI's certificates the chart generates:
relay.<serverName> and ui.<serverName>, never the agents' serverName, so the agents can
admit only the relay (hubble-tls-client-names) and the relay only the UI
(--tls-client-names). */}}
{{- define "myelin.hubbleRelayTLSName" -}}
relay.{{ .Values.hubble.tls.serverName }}
{{- end -}}
{{- define "myelin.hubbleUITLSName" -}}
ui.{{ .Values.hubble.tls.serverName }}
{{- end -}}

{{/* The pod securityContext of the relay and the UI from their podSecurityContext
values: non-root with numeric IDs (the image names no user), fsGroup the group of the
TLS Secret's files (mode 0440), the runtime's seccomp filter. */}}
{{- define "myelin.hubblePodSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .runAsUser }}
runAsGroup: {{ .runAsGroup }}
fsGroup: {{ .fsGroup }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The agent container's ports: every port it serves on the node, by the values
that turn each on ("" when none). The address values are "[ip]:port"; the port is
what follows the last colon. */}}
{{- define "myelin.agentPorts" -}}
{{- $v := .Values -}}
{{- $ports := list -}}
{{- if $v.prometheus.enabled }}{{ $ports = append $ports (list "prometheus" $v.prometheus.port "TCP" "prometheus.port") }}{{ end -}}
{{- if $v.hubble.metrics.enabled }}{{ $ports = append $ports (list "hubble-metrics" $v.hubble.metrics.port "TCP" "hubble.metrics.port") }}{{ end -}}
{{- with include "myelin.hubbleListenAddress" . }}{{ $ports = append $ports (list "hubble-peer" (regexReplaceAll "^.*:" . "") "TCP" "hubble.listenAddress") }}{{ end -}}
{{- if $v.clusterHealthPort }}{{ $ports = append $ports (list "cluster-health" $v.clusterHealthPort "TCP" "clusterHealthPort") }}{{ end -}}
{{- $ports = append $ports (list "health" $v.healthPort "TCP" "healthPort") -}}
{{- if $v.kubeProxyReplacement -}}
{{- with $v.kubeProxyReplacementHealthzBindAddr }}{{ $ports = append $ports (list "kubeproxy-hz" (regexReplaceAll "^.*:" . "") "TCP" "kubeProxyReplacementHealthzBindAddr") }}{{ end -}}
{{- with $v.kubeProxyReplacementMetricsBindAddr }}{{ $ports = append $ports (list "kubeproxy-mx" (regexReplaceAll "^.*:" . "") "TCP" "kubeProxyReplacementMetricsBindAddr") }}{{ end -}}
{{- end -}}
{{- if eq $v.routingMode "tunnel" }}{{ $ports = append $ports (list "tunnel" $v.tunnelPort "UDP" "tunnelPort") }}{{ end -}}
{{- $taken := dict -}}
{{- range $ports }}
{{- $at := printf "%d/%s" (index . 1 | int64) (index . 2) -}}
{{- if hasKey $taken $at -}}
{{- fail (printf "%s and %s both give port %s: the agent serves each on the node's network, where two cannot share a port (the second fails with address already in use on every node); give one of them another port" (get $taken $at) (index . 3) $at) -}}
{{- end -}}
{{- $_ := set $taken $at (index . 3) -}}
{{- end -}}
{{- range $ports }}
- name: {{ index . 0 }}
  containerPort: {{ index . 1 | int64 }}
  protocol: {{ index . 2 }}
{{- end -}}
{{- end -}}
