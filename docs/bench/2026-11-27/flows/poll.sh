#!/bin/sh
# polls the flows-on node's status during a bench: reader class, lifts, lost flow records
out=$1
while :; do
  for n in myelin-node-1 myelin-node-6; do
    /work/wt-flowperf/bin/myelin status --node $n -o json 2>/dev/null | python3 -c '
import json,sys,time
try: s=json.load(sys.stdin)
except Exception: sys.exit(0)
lost=sum(c["packets"] for c in s.get("counters") or [] if c["reason"] in ("FLOWS_LOST","FLOWS_LIMITED"))
print(time.strftime("%H:%M:%S"), s["node"], "lost", lost, "|", s.get("flows",""))' >> $out
  done
  sleep 20
done
