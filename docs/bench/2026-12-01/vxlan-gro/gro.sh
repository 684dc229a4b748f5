#!/bin/bash
# GRO on/off on the receiving node's myelin_vxlan, pod-to-pod TCP_STREAM in tunnel mode.
set -u
K="/root/.cache/myelin/kubernetes/v1.34.4/bin/kubectl --kubeconfig /run/myelin-lab/kubeconfig"
bin/myelin lab up --profile tunnel --nodes 2 > /tmp/gro-labup.log 2>&1 || exit 1
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
for round in 1 2 3 4 5; do
  for gro in on off; do
    ip netns exec myelin-node-2 ethtool -K myelin_vxlan gro $gro
    s0=$(awk '/^cpu /{print $2+$3+$4+$6+$7+$8}' /proc/stat)
    out=$(bin/myelin lab exec p1 -- taskset -c 0 netperf -H $IP2 -t TCP_STREAM -l 3 -P 0 2>&1 | tail -1)
    s1=$(awk '/^cpu /{print $2+$3+$4+$6+$7+$8}' /proc/stat)
    mbps=$(echo "$out" | awk '{print $5}')
    echo "round $round gro $gro mbps $mbps jiffies $((s1-s0)) us_per_KB $(python3 -c "print(round(($((s1-s0))*10000)/($mbps*1e6/8/1024*3),4))")"
  done
done
ip netns exec myelin-node-2 ethtool -k myelin_vxlan | grep -i "generic-receive"
bin/myelin lab down > /dev/null 2>&1
