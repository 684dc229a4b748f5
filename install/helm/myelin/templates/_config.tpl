{{/* The myelin-config data. Empty values are left out, so the agent's defaults apply. */}}
{{- define "myelin.config" -}}
{{- $v := .Values -}}
{{- include "myelin.checkExtraConfig" . -}}
{{- include "myelin.checkMaglevTableSize" $v.maglev.tableSize -}}
{{- with $v.clusterCIDR }}
cluster-cidr: {{ . | quote }}
{{- end }}
routing-mode: {{ $v.routingMode | quote }}
tunnel-protocol: {{ $v.tunnelProtocol | quote }}
tunnel-port: {{ $v.tunnelPort | int64 | quote }}
auto-direct-node-routes: {{ $v.autoDirectNodeRoutes | quote }}
{{- with $v.ipv4NativeRoutingCIDR }}
ipv4-native-routing-cidr: {{ . | quote }}
{{- end }}
host-routing: {{ $v.hostRouting | quote }}
enable-ipv4-masquerade: {{ $v.enableIPv4Masquerade | quote }}
enable-bpf-masquerade: {{ $v.bpf.masquerade | quote }}
enable-bpf-tunnel: {{ $v.bpf.tunnel | quote }}
{{- with $v.nonMasqueradeCIDRs }}
non-masquerade-cidrs: {{ join "," . | quote }}
{{- end }}
user-iptables-guard: {{ $v.userIptablesGuard | quote }}
kube-proxy-replacement: {{ $v.kubeProxyReplacement | quote }}
lb-algorithm: {{ $v.loadBalancer.algorithm | quote }}
lb-ct-pod-max: {{ $v.loadBalancer.ctPodMax | toString | quote }}
maglev-table-size: {{ $v.maglev.tableSize | int64 | quote }}
mtu: {{ $v.MTU | int64 | quote }}
enable-source-ip-verification: {{ $v.enableSourceIPVerification | quote }}
pod-source-from-hosts: {{ $v.podSourceFromHosts | quote }}
tunnel-pod-to-node: {{ $v.tunnelPodToNode | quote }}
enable-ipv4-big-tcp: {{ $v.enableIPv4BIGTCP | quote }}
nat-port-range: {{ $v.natPortRange | quote }}
nat-pod-max: {{ $v.natPodMax | toString | quote }}
bpf-lb-sock: {{ $v.socketLB.enabled | quote }}
kube-proxy-replacement-healthz-bind-address: {{ $v.kubeProxyReplacementHealthzBindAddr | quote }}
kube-proxy-replacement-metrics-bind-address: {{ $v.kubeProxyReplacementMetricsBindAddr | quote }}
nodeport-nat-syn-max: {{ $v.nodePort.natSynMax | int64 | quote }}
nodeport-nat-max: {{ $v.nodePort.natMax | int64 | quote }}
nodeport-nat-udp-max: {{ $v.nodePort.natUDPMax | int64 | quote }}
policy-ct-max: {{ $v.networkPolicy.ctMax | int64 | quote }}
policy-ct-pod-max: {{ $v.networkPolicy.ctPodMax | toString | quote }}
prometheus-serve-addr: {{ if $v.prometheus.enabled }}{{ printf ":%d" ($v.prometheus.port | int64) | quote }}{{ else }}""{{ end }}
{{- if $v.hubble.metrics.enabled }}
hubble-metrics-server: {{ printf ":%d" ($v.hubble.metrics.port | int64) | quote }}
hubble-metrics: {{ join "," $v.hubble.metrics.enabled | quote }}
{{- else }}
hubble-metrics-server: ""
{{- end }}
enable-hubble: {{ $v.hubble.enabled | quote }}
hubble-event-buffer-capacity: {{ $v.hubble.eventBufferCapacity | int64 | quote }}
hubble-listen-address: {{ include "myelin.hubbleListenAddress" . | quote }}
{{- if $v.hubble.tls.enabled }}
hubble-tls-cert-file: "/etc/myelin/hubble-tls/tls.crt"
hubble-tls-key-file: "/etc/myelin/hubble-tls/tls.key"
hubble-tls-client-ca-files: "/etc/myelin/hubble-tls/ca.crt"
{{- if not $v.hubble.tls.secretName }}
hubble-tls-client-names: {{ include "myelin.hubbleRelayTLSName" . | quote }}
{{- end }}
{{- end }}
cluster-health-port: {{ $v.clusterHealthPort | int64 | quote }}
{{- range $k, $val := $v.extraConfig }}
{{ $k }}: {{ $val | quote }}
{{- end }}
{{- end -}}


{{/* The keys a typed value renders, with that value's name. extraConfig may not set
one: two places for one key would leave it unclear which wins. */}}
{{- define "myelin.typedKeys" -}}
cluster-cidr: clusterCIDR
routing-mode: routingMode
tunnel-protocol: tunnelProtocol
tunnel-port: tunnelPort
auto-direct-node-routes: autoDirectNodeRoutes
ipv4-native-routing-cidr: ipv4NativeRoutingCIDR
host-routing: hostRouting
enable-ipv4-masquerade: enableIPv4Masquerade
enable-bpf-masquerade: bpf.masquerade
enable-bpf-tunnel: bpf.tunnel
non-masquerade-cidrs: nonMasqueradeCIDRs
user-iptables-guard: userIptablesGuard
kube-proxy-replacement: kubeProxyReplacement
lb-algorithm: loadBalancer.algorithm
lb-ct-pod-max: loadBalancer.ctPodMax
maglev-table-size: maglev.tableSize
mtu: MTU
enable-source-ip-verification: enableSourceIPVerification
pod-source-from-hosts: podSourceFromHosts
tunnel-pod-to-node: tunnelPodToNode
enable-ipv4-big-tcp: enableIPv4BIGTCP
nat-port-range: natPortRange
nat-pod-max: natPodMax
bpf-lb-sock: socketLB.enabled
kube-proxy-replacement-healthz-bind-address: kubeProxyReplacementHealthzBindAddr
kube-proxy-replacement-metrics-bind-address: kubeProxyReplacementMetricsBindAddr
cgroup-root: socketLB.cgroupRoot
nodeport-nat-syn-max: nodePort.natSynMax
nodeport-nat-max: nodePort.natMax
nodeport-nat-udp-max: nodePort.natUDPMax
policy-ct-max: networkPolicy.ctMax
policy-ct-pod-max: networkPolicy.ctPodMax
prometheus-serve-addr: prometheus.port
hubble-metrics-server: hubble.metrics.port
hubble-metrics: hubble.metrics.enabled
enable-hubble: hubble.enabled
hubble-listen-address: hubble.listenAddress
hubble-event-buffer-capacity: hubble.eventBufferCapacity
hubble-tls-cert-file: hubble.tls.enabled
hubble-tls-key-file: hubble.tls.enabled
hubble-tls-client-ca-files: hubble.tls.enabled
hubble-tls-client-names: hubble.tls.enabled
cluster-health-port: clusterHealthPort
{{- end -}}

{{- define "myelin.checkExtraConfig" -}}
{{- $typed := include "myelin.typedKeys" . | fromYaml -}}
{{- range $k, $_ := .Values.extraConfig -}}
{{- with get $typed $k -}}
{{- fail (printf "extraConfig.%s: the chart renders key %q from the value %s; set %s instead of extraConfig.%s" $k $k . . $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The agent takes only a prime maglev-table-size, which the schema cannot say. */}}
{{- define "myelin.checkMaglevTableSize" -}}
{{- $n := . | int64 -}}
{{- range $d := untilStep 2 363 1 -}}
{{- if and (le (mul $d $d) $n) (eq (mod $n $d) 0) -}}
{{- fail (printf "maglev.tableSize %d is not a prime (%d divides it) and the agent refuses it: use a prime between 251 and 131071, e.g. 16381 or 65521" $n $d) -}}
{{- end -}}
{{- end -}}
{{- end -}}
