#!/bin/bash
C=tunnel/bpf-cross-node/tcp-rr/same-vcpu,tunnel/bpf-cross-node/tcp-crr/same-vcpu,tunnel/bpf-cross-node/tcp-rr/cross-vcpu,tunnel/bpf-cross-node/tcp-stream/same-vcpu
for r in decap encap decap encap; do
  flock /tmp/myelin-root.lock /tmp/bb-$r/myelin bench --rounds 5 --duration 3s --cases $C --out /tmp/pstream/ab2-$r-$(date +%H%M%S) > /tmp/pstream/ab2-$r.log 2>&1
done
echo done > /tmp/pstream/ab2.done
