#!/bin/bash
# ab.sh: tunnel TCP_RR/CRR, base and decap binaries alternately
C=tunnel/bpf-cross-node/tcp-rr/same-vcpu,tunnel/bpf-cross-node/tcp-crr/same-vcpu,tunnel/bpf-cross-node/tcp-rr/cross-vcpu
for r in base decap base decap; do
  flock /tmp/myelin-root.lock /tmp/bb-$r/myelin bench --rounds 5 --duration 3s --cases $C --out /tmp/pstream/ab-$r-$(date +%H%M) > /tmp/pstream/ab-$r.log 2>&1
done
echo done > /tmp/pstream/ab.done
