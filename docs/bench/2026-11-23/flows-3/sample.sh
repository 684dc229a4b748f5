#!/bin/bash
# sample.sh OUT: every 2 s, agents' CPU ticks and context switches, BPF program stats,
# and each lab node's myelin_flows map id (to attribute programs to nodes).
out=$1; mkdir -p $out; n=0
while true; do
  ts=$(date +%s.%N)
  for p in $(pgrep -x myelin-agent); do
    node=$(tr '\0' ' ' < /proc/$p/cmdline | grep -o 'myelin-node-[0-9]*' | head -1)
    st=$(awk '{print $14, $15}' /proc/$p/stat 2>/dev/null)
    cs=$(cat /proc/$p/task/*/status 2>/dev/null | awk '/^voluntary_ctxt/{v+=$2} /^nonvoluntary_ctxt/{n+=$2} END{print v, n}')
    echo "$ts $p $node $st $cs" >> $out/agents.txt
  done
  for d in /sys/fs/bpf/myelin/myelin-node-*; do
    [ -e $d/myelin_flows ] || continue
    id=$(bpftool map show pinned $d/myelin_flows -j 2>/dev/null | grep -o '"id":[0-9]*' | head -1)
    echo "$ts $(basename $d) $id" >> $out/flowmaps.txt
  done
  bpftool prog show -j > $out/progs-$ts.json 2>/dev/null
  n=$((n+1))
  if [ $((n % 5)) = 0 ] && [ -S /run/myelin/myelin-node-1/agent.sock ]; then
    timeout 5 /tmp/fp-bin2/myelin status --node myelin-node-1 -o json > $out/status-1-$ts.json 2>&1
  fi
  sleep 2
done
