#!/bin/bash
# tp.sh NAME CMD...: run CMD (a 6 s netperf) and count per-device packet events in 1 s of it
name=$1; shift
("$@" > /tmp/pstream/np-$name.txt 2>&1 &); sleep 2
perf record -a -e net:net_dev_xmit -e net:netif_receive_skb -e net:netif_rx -e net:napi_gro_receive_entry -o /tmp/pstream/tp-$name.data -- sleep 1 > /dev/null 2>&1; sleep 4.5
tail -1 /tmp/pstream/np-$name.txt
perf script -i /tmp/pstream/tp-$name.data -F event,trace 2>/dev/null | python3 -c '
import sys,re,collections
c=collections.Counter(); b=collections.Counter()
for l in sys.stdin:
    m=re.search(r"dev=(\S+)",l); d=m.group(1) if m else "?"
    m2=re.search(r"len=(\d+)",l); n=int(m2.group(1)) if m2 else 0
    k=(l.split()[0],d); c[k]+=1; b[k]+=n
for k,v in sorted(c.items(), key=lambda x:-x[1]): print("%-30s %-16s %7d avg %6d"%(k[0],k[1], v, b[k]//v))
'
