cd /work/main
bin/myelin lab exec p2 -- taskset -c 0 netserver -p 12865 >/dev/null 2>&1
sleep 1
bin/myelin lab exec p1 -- taskset -c 0 netperf -H 10.244.0.3 -p 12865 -t TCP_RR -l 20 -P 0 -T 0,0 > /tmp/prof-rr.txt 2>&1 &
sleep 2
perf record -C 0 -g -o /tmp/prof-rr.data -- sleep 15 > /dev/null 2>&1
wait
cat /tmp/prof-rr.txt
