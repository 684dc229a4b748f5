package datapath

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"
)

// skbCtxGSO is struct __sk_buff up to gso_size, the fields test-run copies
// into the skb (ingress_ifindex, gso_segs, gso_size; the rest must be 0).
type skbCtxGSO struct {
	skbCtx
	TCIndex                                        uint32
	CB                                             [5]uint32
	Hash, TCClassid, Data, DataEnd, NapiID, Family uint32
	RemoteIP4, LocalIP4                            uint32
	RemoteIP6, LocalIP6                            [4]uint32
	RemotePort, LocalPort, DataMeta                uint32
	FlowKeys, Tstamp                               uint64
	WireLen, GSOSegs                               uint32
	Sk                                             uint64
	GSOSize                                        uint32
}

// zeroTotLen returns frame with IPv4 total length 0 and a fixed header checksum.
func zeroTotLen(frame []byte) []byte {
	return mutate(frame, func(b []byte) []byte {
		hlen := int(b[14]&0x0f) * 4
		b[16], b[17], b[24], b[25] = 0, 0, 0, 0
		binary.BigEndian.PutUint16(b[24:], checksum(b[14:14+hlen], 0))
		return b
	})
}

// BIG TCP: GRO (and the stack) build TCP packets beyond 64 KiB whose IPv4
// total length is 0; the length is the skb's. Such a GSO packet is routed
// (and masqueraded) like any other; without GSO, or for UDP, total length 0
// stays malformed.
// Test-run takes gso_size from the context (a real BIG TCP skb's size is
// beside the point: only the zero total length and the GSO state matter).
func TestPrivilegedBPFBigTCP(t *testing.T) {
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	dm := loadMasq(t, HostRoutingBPF, 0)
	tcp := ipv4(protoTCP, podA, podBIP)
	tcp.payload = make([]byte, 3000)
	out := tcp.withDst(extHost, 80)
	udp := ipv4(protoUDP, podA, podBIP)
	gso := &skbCtxGSO{skbCtx: *ctxPodA, GSOSegs: 3, GSOSize: 1448}
	for _, c := range []struct {
		name, dir, reason string
		d                 *Datapath
		in                []byte
		ctx               any
		verdict           uint32
		out               []byte
	}{
		{"from a pod: delivered", "from-pod", "FORWARDED", d, zeroTotLen(tcp.build()), *gso, tcActRedirect, zeroTotLen(delivered(tcp))},
		{"from the uplink: delivered", "from-netdev", "FORWARDED", d, zeroTotLen(tcp.build()), *gso, tcActRedirect, zeroTotLen(delivered(tcp))},
		{"to the outside: masqueraded", "to-netdev", "PASS_STACK", dm, zeroTotLen(out.build()), *gso, tcActOK, zeroTotLen(out.withSrc(nodeIP, testNATPort).build())},
		{"without GSO: malformed", "from-pod", "DROP_INVALID_PACKET", d, zeroTotLen(tcp.build()), *ctxPodA, tcActShot, nil},
		{"UDP with GSO: malformed", "from-pod", "DROP_INVALID_PACKET", d, zeroTotLen(udp.build()), *gso, tcActShot, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := seedEndpoints(c.d, seedAB); err != nil {
				t.Fatal(err)
			}
			prog := map[string]*ebpf.Program{"from-pod": c.d.objs.MyelinFromPod, "from-netdev": c.d.objs.MyelinFromNetdev,
				"to-netdev": c.d.objs.MyelinToNetdev}[c.dir]
			before, err := counter(c.d, c.dir, c.reason)
			if err != nil {
				t.Fatal(err)
			}
			opts := runOptions(c.in, c.ctx)
			ret, err := prog.Run(opts)
			if err != nil {
				t.Fatal(err)
			}
			want := c.out
			if want == nil {
				want = c.in
			}
			if ret != c.verdict || !bytes.Equal(opts.DataOut, want) {
				t.Errorf("verdict %d, out\n%x\nwant %d,\n%x", ret, opts.DataOut, c.verdict, want)
			}
			after, err := counter(c.d, c.dir, c.reason)
			if err != nil {
				t.Fatal(err)
			}
			if after.Packets-before.Packets != 1 {
				t.Errorf("counter %s/%s grew by %d packets, want 1", c.dir, c.reason, after.Packets-before.Packets)
			}
		})
	}
}

// runOptions is a test-run of in with the context ctx.
func runOptions(in []byte, ctx any) *ebpf.RunOptions {
	return &ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)+256), Context: ctx}
}
