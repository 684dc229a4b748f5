#!/bin/bash
# capture.sh OUTDIR SECONDS: whenever a netperf client starts, record the whole machine
# for SECONDS into OUTDIR/<n>-<netns>.data (netns from ip netns identify).
out=$1; secs=$2; n=0; mkdir -p $out
while true; do
  pid=$(pgrep -x netperf | head -1)
  if [ -n "$pid" ]; then
    ns=$(ip netns identify $pid 2>/dev/null); args=$(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null)
    n=$((n+1)); echo "$n $ns $args" >> $out/index.txt
    sleep 1
    perf record -a -g -o $out/$n-$ns.data -- sleep $secs > /dev/null 2>&1
    while kill -0 $pid 2>/dev/null; do sleep 0.1; done
  fi
  sleep 0.1
done
