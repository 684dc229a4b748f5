#!/bin/bash
# Under the root lock: for each run of /tmp/fp/runs.txt ("name bindir stats|nostats
# cases", read when the lock is taken): load, sampler, bpf_stats if asked (the old value
# restored after the run and on exit), the bench; then /tmp/fp/after.sh if present.
old=$(sysctl -n kernel.bpf_stats_enabled)
sampler=
cleanup() { [ -n "$sampler" ] && kill $sampler 2>/dev/null; sysctl -w kernel.bpf_stats_enabled=$old; }
trap cleanup EXIT
cp /tmp/fp/runs.txt /tmp/fp/runs.taken
while read -r name bindir stats cases; do
  [ -z "$name" ] && continue
  out=/tmp/fp/$name; mkdir -p $out
  { date -u; uptime; top -bn1 | head -15; } > $out/load-before.txt
  [ "$stats" = stats ] && sysctl -w kernel.bpf_stats_enabled=1
  /tmp/fp/sample.sh $out & sampler=$!
  (cd /work/wt-flowperf && $bindir/myelin bench --cases "$cases" --rounds 5 --duration 3s --out $out/bench > $out/bench.log 2>&1; echo rc=$? >> $out/bench.log)
  kill $sampler; sampler=
  sysctl -w kernel.bpf_stats_enabled=$old
  { date -u; uptime; top -bn1 | head -15; } > $out/load-after.txt
  if [ "$name" = proof ] && [ -x /tmp/fp/after.sh ]; then /tmp/fp/after.sh > /tmp/fp/after.log 2>&1; fi
done < /tmp/fp/runs.taken
