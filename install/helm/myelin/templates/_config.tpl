{{/* The myelin-config data. Empty values are left out, so the agent's defaults apply. */}}
{{- define "myelin.config" -}}
{{- $v := .Values -}}
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
{{- with $v.nonMasqueradeCIDRs }}
non-masquerade-cidrs: {{ join "," . | quote }}
{{- end }}
user-iptables-guard: {{ $v.userIptablesGuard | quote }}
kube-proxy-replacement: {{ $v.kubeProxyReplacement | quote }}
lb-algorithm: {{ $v.loadBalancer.algorithm | quote }}
maglev-table-size: {{ $v.maglev.tableSize | int64 | quote }}
mtu: {{ $v.MTU | int64 | quote }}
enable-source-ip-verification: {{ $v.enableSourceIPVerification | quote }}
nat-port-range: {{ $v.natPortRange | quote }}
nodeport-nat-syn-max: {{ $v.nodePort.natSynMax | int64 | quote }}
nodeport-nat-max: {{ $v.nodePort.natMax | int64 | quote }}
{{- range $k, $val := $v.extraConfig }}
{{ $k }}: {{ $val | quote }}
{{- end }}
{{- end -}}
