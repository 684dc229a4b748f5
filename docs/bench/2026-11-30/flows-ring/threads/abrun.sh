#!/bin/bash
# Usage: abrun.sh BIN_DIR TAG (as root): one same-vCPU TCP_CRR run of 40 s, the agents' threads sampled over 20 s of it into /tmp/ab-TAG/threads.txt
# $1 = bin dir, $2 = tag
out=/tmp/ab-$2; rm -rf $out; mkdir -p $out
flock /tmp/myelin-root.lock $1/myelin bench --rounds 1 --duration 40s --cases native/bpf-same-node/tcp-crr/same-vcpu --out $out/bench > $out/log 2>&1 &
for i in $(seq 1 200); do sleep 2; grep -q "veth-pair/tcp-crr" $out/log && break; done
sleep 12
python3 "$(dirname "$0")/../../flows-netpoll/threads/sample-threads.py" 20 > $out/threads.txt
wait
grep "rate" $out/log
