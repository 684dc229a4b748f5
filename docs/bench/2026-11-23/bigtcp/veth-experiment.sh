set -x
ip netns add btA; ip netns add btB
ip link add bta type veth peer name btb
ip link set bta netns btA; ip link set btb netns btB
ip -n btA addr add 10.99.0.1/24 dev bta; ip -n btB addr add 10.99.0.2/24 dev btb
ip -n btA link set bta up; ip -n btB link set btb up; ip -n btA link set lo up; ip -n btB link set lo up
/tmp/bigtcp-exp btA bta
ip netns exec btB netserver -p 12865 >/dev/null
sleep 0.5
for size in 65536 196608 65536 196608; do
  /tmp/bigtcp-exp btA bta $size >/dev/null; /tmp/bigtcp-exp btB btb $size >/dev/null
  ip netns exec btA netperf -H 10.99.0.2 -t TCP_STREAM -l 3 -c -C -P 0 -- -m 65536 | sed "s/^/size=$size /"
done
ip netns exec btB ip -s link show btb | head -5
ip netns pids btB | xargs -r kill
ip netns del btA; ip netns del btB
