C='native/bpf-same-node/tcp-rr/same-vcpu,native/bpf-cross-node/tcp-rr/same-vcpu,native/bpf-cross-node/tcp-stream/same-vcpu'
for i in 1 2; do
  for b in old new; do
    if [ $b = old ]; then cd /tmp/old-wt; else cd /work/main; fi
    bin/myelin bench --bpf-stats --rounds 5 --duration 3s --cases "$C" --out /tmp/ab-$b-$i > /tmp/ab-$b-$i.log 2>&1
    echo "$b $i rc=$?"
  done
done
