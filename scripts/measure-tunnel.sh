#!/usr/bin/env bash
# measure-tunnel.sh: interim measurement of tunnel vs native routing (until `myelin bench`
# lands). For each routing mode it brings up a 4-node lab (nodes 1-2 BPF host routing,
# nodes 3-4 legacy via a NodeConfig) and measures, interleaved round by round:
#   iperf3 TCP throughput (5 s) and sockperf UDP ping-pong latency (3 s), client and
#   server pinned to CPU 0, for node-to-node (baseline), BPF cross-node, legacy cross-node.
# Routing mode is cluster-wide, so the two modes run in two labs one after the other;
# compare them through their ratios to the node-to-node baseline of the same lab.
# Usage: scripts/measure-tunnel.sh [ROUNDS]   (as root)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/versions.sh
rounds=${1:-3}
myelin=$PWD/bin/myelin
export KUBECONFIG=/run/myelin-lab/kubeconfig PATH="$KUBE_BIN_DIR:$PATH"
trap '"$myelin" lab down >/dev/null' EXIT
results=$(mktemp)

pod() { # name node command...
	local name=$1 node=$2
	shift 2
	local cmd
	cmd=$(printf '"%s",' "$@")
	cat <<YAML | kubectl apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: $name, labels: {app: bench}}
spec:
  nodeName: $node
  containers: [{name: c, image: host, command: [${cmd%,}]}]
YAML
}

for mode in native tunnel; do
	"$myelin" lab down >/dev/null
	"$myelin" lab up --nodes 4 --profile "$mode" >/dev/null
	cat <<YAML | kubectl apply -f - >/dev/null
apiVersion: myelin.io/v1alpha1
kind: NodeConfig
metadata: {name: legacy, namespace: kube-system}
spec:
  nodeSelector: {matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [myelin-node-3, myelin-node-4]}]}
  defaults: {host-routing: legacy}
YAML
	"$myelin" lab restart agent-myelin-node-3
	"$myelin" lab restart agent-myelin-node-4
	pod cli1 myelin-node-1 sleep infinity
	pod ip2 myelin-node-2 iperf3 -s
	pod sp2 myelin-node-2 sockperf server -i 0.0.0.0 -p 11111
	pod cli3 myelin-node-3 sleep infinity
	pod ip4 myelin-node-4 iperf3 -s
	pod sp4 myelin-node-4 sockperf server -i 0.0.0.0 -p 11111
	kubectl wait --for=condition=Ready pod -l app=bench --timeout=120s >/dev/null
	nsenter --net=/run/netns/myelin-node-2 iperf3 -s -D
	nsenter --net=/run/netns/myelin-node-2 sockperf server -i 198.18.0.12 -p 11112 >/dev/null 2>&1 &
	ip() { kubectl get pod "$1" -o jsonpath='{.status.podIP}'; }
	declare -A run ipt spt spp
	run[node-to-node]="nsenter --net=/run/netns/myelin-node-1"; ipt[node-to-node]=198.18.0.12; spt[node-to-node]=198.18.0.12; spp[node-to-node]=11112
	run[bpf-cross-node]="$myelin lab exec cli1 --"; ipt[bpf-cross-node]=$(ip ip2); spt[bpf-cross-node]=$(ip sp2); spp[bpf-cross-node]=11111
	run[legacy-cross-node]="$myelin lab exec cli3 --"; ipt[legacy-cross-node]=$(ip ip4); spt[legacy-cross-node]=$(ip sp4); spp[legacy-cross-node]=11111
	sleep 1
	for r in $(seq "$rounds"); do
		for c in node-to-node bpf-cross-node legacy-cross-node; do
			# shellcheck disable=SC2086
			gbps=$(${run[$c]} taskset -c 0 iperf3 -c ${ipt[$c]} -t 5 -A 0,0 -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9)')
			# shellcheck disable=SC2086
			p50=$(${run[$c]} taskset -c 0 sockperf ping-pong -i ${spt[$c]} -p ${spp[$c]} -t 3 2>&1 | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p')
			echo "$mode $c iperf3_gbps $gbps" >>"$results"
			echo "$mode $c sockperf_p50_us $p50" >>"$results"
		done
		echo "$mode round $r done" >&2
	done
	unset run ipt spt spp
done
python3 - "$results" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    mode, case, metric, v = line.split()
    d[(metric, mode, case)].append(float(v))
med = {k: statistics.median(v) for k, v in d.items()}
for (metric, mode, case), v in sorted(d.items()):
    base = med[(metric, mode, "node-to-node")]
    print(f"{metric:16} {mode:7} {case:18} median {med[(metric, mode, case)]:8.2f}  min {min(v):8.2f}  max {max(v):8.2f}  {med[(metric, mode, case)]/base:.2f}x node-to-node")
PY
