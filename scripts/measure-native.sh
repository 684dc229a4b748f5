#!/usr/bin/env bash
# measure-native.sh: interim measurement of the native datapath (until `myelin bench`
# lands). netperf 1-byte TCP_RR and TCP_CRR, client and server pinned to the same vCPU
# (netperf -T 0,0), cases interleaved round by round in one 4-node lab:
#   loopback, bare veth pair, node-to-node, pod-to-pod same node and across nodes with
#   BPF host routing (nodes 1, 2) and with legacy host routing (nodes 3, 4).
# Prints one line per case: median and min-max of ROUNDS runs of LEN seconds.
# Usage: scripts/measure-native.sh [ROUNDS] [LEN]   (as root; brings its own lab up and down)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/versions.sh
rounds=${1:-5}
len=${2:-3}
myelin=$PWD/bin/myelin
export KUBECONFIG=/run/myelin-lab/kubeconfig PATH="$KUBE_BIN_DIR:$PATH"

trap '"$myelin" lab down >/dev/null' EXIT
"$myelin" lab up --nodes 4 --cni myelin --profile native >/dev/null
kubectl -n kube-system patch configmap myelin-config --type merge -p '{"data":{"host-routing":"legacy"}}' >/dev/null
"$myelin" lab restart agent-myelin-node-3
"$myelin" lab restart agent-myelin-node-4

pod() { # name node [hostNetwork]
	cat <<YAML | kubectl apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {app: bench}}
spec:
  nodeName: $2
  hostNetwork: ${3:-false}
  containers: [{name: c, image: host, command: [netserver, -D, -p, "12865"]}]
YAML
}
pod srv1 myelin-node-1; pod cli1 myelin-node-1; pod srv2 myelin-node-2
pod srv3 myelin-node-3; pod cli3 myelin-node-3; pod srv4 myelin-node-4
pod host2 myelin-node-2 true
kubectl wait --for=condition=Ready pod -l app=bench --timeout=120s >/dev/null
ip() { kubectl get pod "$1" -o jsonpath='{.status.podIP}'; }

# The bare veth pair: the same-node physical limit.
command ip netns add myelin-bench-a; command ip netns add myelin-bench-b
command ip -n myelin-bench-a link add veth0 type veth peer name veth0 netns myelin-bench-b
command ip -n myelin-bench-a addr add 10.99.0.1/24 dev veth0; command ip -n myelin-bench-a link set veth0 up
command ip -n myelin-bench-b addr add 10.99.0.2/24 dev veth0; command ip -n myelin-bench-b link set veth0 up
command ip -n myelin-bench-a link set lo up
nsenter --net=/run/netns/myelin-bench-b netserver -p 12865 >/dev/null
nsenter --net=/run/netns/myelin-bench-a netserver -p 12866 -L 127.0.0.1 >/dev/null

declare -A from to
from[loopback]="nsenter --net=/run/netns/myelin-bench-a"; to[loopback]="127.0.0.1 -p 12866"
from[veth-pair]="nsenter --net=/run/netns/myelin-bench-a"; to[veth-pair]=10.99.0.2
from[node-to-node]="nsenter --net=/run/netns/myelin-node-1"; to[node-to-node]=198.18.0.12
from[bpf-same-node]="$myelin lab exec cli1 --"; to[bpf-same-node]=$(ip srv1)
from[bpf-cross-node]="$myelin lab exec cli1 --"; to[bpf-cross-node]=$(ip srv2)
from[legacy-same-node]="$myelin lab exec cli3 --"; to[legacy-same-node]=$(ip srv3)
from[legacy-cross-node]="$myelin lab exec cli3 --"; to[legacy-cross-node]=$(ip srv4)
cases=(loopback veth-pair node-to-node bpf-same-node bpf-cross-node legacy-same-node legacy-cross-node)

results=$(mktemp)
for r in $(seq "$rounds"); do
	for test in TCP_RR TCP_CRR; do
		for c in "${cases[@]}"; do
			# shellcheck disable=SC2086
			v=$(${from[$c]} netperf -H ${to[$c]} -t "$test" -l "$len" -T 0,0 -P 0 -- -r 1,1 -o THROUGHPUT)
			echo "$test $c $v" >>"$results"
		done
	done
	echo "round $r done" >&2
done
python3 - "$results" <<'PY'
import statistics, sys, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    t, c, v = line.split()
    d[(t, c)].append(float(v))
med = {k: statistics.median(v) for k, v in d.items()}
ratios = {"bpf-cross-node": "node-to-node", "bpf-same-node": "veth-pair",
          "legacy-cross-node": "node-to-node", "legacy-same-node": "veth-pair"}
for (t, c), v in sorted(d.items()):
    extra = ""
    if c in ratios:
        extra = f"  {med[(t, c)] / med[(t, ratios[c])]:.2f}x {ratios[c]}"
    if c.startswith("bpf-"):
        other = ("legacy-" + c[4:])
        extra += f"  {med[(t, c)] / med[(t, other)]:.2f}x {other}"
    print(f"{t:8} {c:18} median {med[(t, c)]:9.0f}/s  min {min(v):9.0f}  max {max(v):9.0f}{extra}")
PY
