package datapath

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"reflect"
	"testing"
	"time"
)

// rawFlow encodes h as the datapath writes it, followed by payload.
func rawFlow(t *testing.T, h myelinFlowRecord, payload []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := binary.Write(&b, binary.NativeEndian, h); err != nil {
		t.Fatal(err)
	}
	return append(b.Bytes(), payload...)
}

func netAddr(s string) uint32 {
	a := netip.MustParseAddr(s).As4()
	return binary.NativeEndian.Uint32(a[:])
}

func TestDecodeFlowRecord(t *testing.T) {
	boot := time.Unix(1000, 0)
	src, dst := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.244.2.7")
	base := myelinFlowRecord{Ktime: 5e9, Saddr: netAddr("10.244.1.5"), Daddr: netAddr("10.244.2.7"),
		Sport: htons(40000), Dport: htons(80), Proto: 6, Ifindex: 7, Len: 74}
	syn := base
	syn.Kind, syn.TcpFlags = uint8(myelinFlowKindFLOW_TCP), 0x02
	drop := base
	drop.Kind, drop.Reason, drop.Dir = uint8(myelinFlowKindFLOW_DROP), uint8(myelinReasonDROP_POLICY_DENIED), uint8(myelinDirectionDIR_TO_POD)
	svc := base
	svc.Kind, svc.SvcAddr, svc.SvcPort = uint8(myelinFlowKindFLOW_TCP), netAddr("10.96.0.20"), htons(8080)
	sum := base
	sum.Kind, sum.Proto, sum.Packets, sum.Bytes = uint8(myelinFlowKindFLOW_SUMMARY), 17, 12, 3400
	dns := base
	dns.Kind, dns.Proto, dns.Dport, dns.PayloadLen = uint8(myelinFlowKindFLOW_DNS), 17, htons(53), 3
	cases := []struct {
		name    string
		raw     []byte
		want    FlowRecord
		payload string
	}{
		{"syn", rawFlow(t, syn, nil), FlowRecord{Time: boot.Add(5 * time.Second), Kind: FlowTCP, Reason: "FORWARDED", Direction: "from-pod",
			IfIndex: 7, Src: src, Dst: dst, Proto: 6, SrcPort: 40000, DstPort: 80, TCPFlags: 2, Len: 74}, ""},
		{"policy drop", rawFlow(t, drop, nil), FlowRecord{Time: boot.Add(5 * time.Second), Kind: FlowDrop, Reason: "DROP_POLICY_DENIED", Direction: "to-pod",
			IfIndex: 7, Src: src, Dst: dst, Proto: 6, SrcPort: 40000, DstPort: 80, Len: 74}, ""},
		{"service", rawFlow(t, svc, nil), FlowRecord{Time: boot.Add(5 * time.Second), Kind: FlowTCP, Reason: "FORWARDED", Direction: "from-pod",
			IfIndex: 7, Src: src, Dst: dst, Proto: 6, SrcPort: 40000, DstPort: 80, Len: 74,
			Service: netip.MustParseAddrPort("10.96.0.20:8080")}, ""},
		{"summary", rawFlow(t, sum, nil), FlowRecord{Time: boot.Add(5 * time.Second), Kind: FlowSummary, Reason: "FORWARDED", Direction: "from-pod",
			IfIndex: 7, Src: src, Dst: dst, Proto: 17, SrcPort: 40000, DstPort: 80, Len: 74, Packets: 12, Bytes: 3400}, ""},
		{"dns payload", rawFlow(t, dns, []byte("abcdef")), FlowRecord{Time: boot.Add(5 * time.Second), Kind: FlowDNS, Reason: "FORWARDED", Direction: "from-pod",
			IfIndex: 7, Src: src, Dst: dst, Proto: 17, SrcPort: 40000, DstPort: 53, Len: 74}, "abc"},
	}
	for _, c := range cases {
		got, err := DecodeFlowRecord(c.raw, boot)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(got.Payload) != c.payload {
			t.Errorf("%s: payload %q, want %q", c.name, got.Payload, c.payload)
		}
		got.Payload = nil
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
	bad := dns
	bad.PayloadLen = 300
	for name, raw := range map[string][]byte{"short": rawFlow(t, syn, nil)[:20], "dns payload past the end": rawFlow(t, bad, nil),
		"unknown kind": rawFlow(t, myelinFlowRecord{Kind: 99}, nil)} {
		if _, err := DecodeFlowRecord(raw, boot); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// BenchmarkDecodeFlowRecord is the agent's decode of one record (of the four per TCP
// connection): `go test -run - -bench DecodeFlowRecord ./internal/datapath/`.
func BenchmarkDecodeFlowRecord(b *testing.B) {
	var buf bytes.Buffer
	h := myelinFlowRecord{Ktime: 5e9, Saddr: netAddr("10.244.1.5"), Daddr: netAddr("10.244.2.7"), Sport: htons(40000),
		Dport: htons(80), Proto: 6, Ifindex: 7, Len: 74, Kind: uint8(myelinFlowKindFLOW_TCP), TcpFlags: 0x02}
	if err := binary.Write(&buf, binary.NativeEndian, h); err != nil {
		b.Fatal(err)
	}
	raw, boot := buf.Bytes(), time.Unix(1000, 0)
	for b.Loop() {
		if _, err := DecodeFlowRecord(raw, boot); err != nil {
			b.Fatal(err)
		}
	}
}
