#!/bin/bash
set -u
cd /work/main
K="/root/.cache/myelin/kubernetes/v1.34.4/bin/kubectl --kubeconfig /run/myelin-lab/kubeconfig"
bin/myelin lab up --profile tunnel --nodes 2 > /tmp/perf-labup.log 2>&1 || exit 1
for n in 1 2; do
$K apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: p$n}
spec:
  nodeName: myelin-node-$n
  containers: [{name: c, image: busybox, command: ["sleep", "infinity"]}]
YAML
done
$K wait --for=condition=Ready pod/p1 pod/p2 --timeout=120s >/dev/null || exit 1
IP2=$($K get pod p2 -o jsonpath='{.status.podIP}')
bin/myelin lab exec p2 -- taskset -c 0 netserver -D > /dev/null 2>&1 &
sleep 1
bin/myelin lab exec p1 -- taskset -c 0 netperf -H $IP2 -t TCP_STREAM -l 12 -P 0 > /tmp/perf-np.txt 2>&1 &
sleep 2
perf record -q -C 0 -g -o /tmp/perf-tun.data -- sleep 6 > /dev/null 2>&1
wait %2 2>/dev/null
cat /tmp/perf-np.txt
bin/myelin lab down > /dev/null 2>&1
