#!/bin/bash
# A/B of the node's own traffic cost: fb12d55 (before) vs HEAD (after), node-to-node as the baseline.
set -e
for v in old new old new; do
  out=/tmp/nt-$v-$(date +%s)
  /tmp/bb-$v/myelin bench --bpf-stats --rounds 5 --duration 3s \
    --cases native/bpf-cross-node/tcp-crr/same-vcpu,native/bpf-cross-node/tcp-rr/same-vcpu --out $out > $out.log 2>&1
  echo "$v $out"
done
