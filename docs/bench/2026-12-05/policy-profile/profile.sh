#!/bin/bash
# profile.sh OUT [REPO]: a flat perf profile of both vCPUs (cpu-clock, 1,999 Hz, wall
# clock timestamps) during the two TCP_CRR policy cases of `myelin bench` and their
# baselines, for attr.py. Run as root from a built tree (make build); writes
# OUT/perf.data, OUT/perf.txt, OUT/bench.log (each bench line with its time) and the
# bench report in OUT/out.
set -u
out=$1 repo=${2:-.}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$repo"
perf record -o "$out/perf.data" -k CLOCK_REALTIME -e cpu-clock -F 1999 -a -- sleep 600 > "$out/perf.log" 2>&1 &
rec=$!
bin/myelin bench --rounds 5 --duration 3s --out "$out/out" \
	--cases 'native/bpf-policy-cross-node/tcp-crr/same-vcpu,native/bpf-policy-same-node/tcp-crr/same-vcpu' 2>&1 |
	while IFS= read -r l; do echo "$(date +%s.%N) $l"; done > "$out/bench.log"
kill -INT $rec
wait $rec
perf script -i "$out/perf.data" -F cpu,time,ip,sym,dso --ns > "$out/perf.txt" 2>/dev/null
