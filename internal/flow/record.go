package flow

import (
	"net/netip"
	"time"
)

// Record is a flow as a node keeps it: what the datapath reported, its ends already
// resolved to pods, in ~150 bytes where a Flow takes ~400. The agent turns several
// records per new connection into Records (docs/observability.md, "What it costs"),
// while a Flow is made of one only when someone reads it (Into): a history read, a
// follower, a Hubble client. The metrics count Records as they are.
//
// A flow made whole where it came from (a LOST count, a flow added by Store.Add) is
// kept as Full, and the rest is unused.
type Record struct {
	Full *Flow
	Time int64 // Unix nanoseconds
	// Src and Dst are the pods with the addresses when the record was made, shared
	// and read-only (their IP is set); nil: an address of no known pod.
	Src, Dst     *Endpoint
	SrcIP, DstIP [4]byte // IPv4; both zero when the datapath read no IPv4 header
	Service      string  // "namespace/name" of the Service it went through
	DropReason   string  // the datapath's reason (DROP_...), on a drop or a denied verdict
	Policies     []string
	DNS          *DNS   // a DNS flow's message (read-only)
	Packets      uint64 // an aggregated summary's counts (0 for a single packet)
	Bytes        uint64
	// SrcPort and DstPort are the ports; for ICMP, SrcPort is type<<8 | code as the
	// datapath reports them.
	SrcPort, DstPort uint16
	Type             Type
	Direction        Direction
	Proto            uint8
	TCPFlags         uint8 // the TCP header's flags byte
}

// Whole is the Record that keeps f (not copied).
func Whole(f *Flow) Record { return Record{Full: f} }

// TCP flag bits of the TCP header's flags byte.
const (
	TCPFlagFIN = 0x01
	TCPFlagSYN = 0x02
	TCPFlagRST = 0x04
	TCPFlagPSH = 0x08
	TCPFlagACK = 0x10
)

// tcpFlagBits are the flags a Flow carries.
const tcpFlagBits = TCPFlagFIN | TCPFlagSYN | TCPFlagRST | TCPFlagPSH | TCPFlagACK

// tcpFlagSets are the TCPFlags of every combination of tcpFlagBits, by flags byte:
// shared by every flow with the same flags (a flow read out is never changed, so
// they are read-only), one allocation less per flow.
var tcpFlagSets = func() (t [tcpFlagBits + 1]TCPFlags) {
	for b := range t {
		t[b] = TCPFlags{SYN: b&TCPFlagSYN != 0, ACK: b&TCPFlagACK != 0, FIN: b&TCPFlagFIN != 0, RST: b&TCPFlagRST != 0, PSH: b&TCPFlagPSH != 0}
	}
	return t
}()

// IsReply: a DNS response, or a SYN-ACK, the answer to a new connection (the
// datapath reports no other TCP packet as a reply).
func (r *Record) IsReply() bool {
	if r.DNS != nil {
		return r.DNS.Response
	}
	return r.Proto == 6 && r.TCPFlags&(TCPFlagSYN|TCPFlagACK) == TCPFlagSYN|TCPFlagACK
}

// Verdict is the record's: DROPPED for a drop and a denied policy verdict.
func (r *Record) Verdict() Verdict {
	if r.Full != nil {
		return r.Full.Verdict
	}
	if r.Type == TypeDrop || r.DropReason != "" {
		return Dropped
	}
	return Forwarded
}

// Into writes the Flow r stands for to f (all of it: f may hold an older flow), as
// observed by node in host-routing mode hostRouting.
func (r *Record) Into(f *Flow, node, hostRouting string) {
	if r.Full != nil {
		*f = *r.Full
		return
	}
	*f = Flow{
		Time: time.Unix(0, r.Time), Node: node, HostRouting: hostRouting,
		Type: r.Type, Verdict: r.Verdict(), DropReason: r.DropReason, Direction: r.Direction,
		Source: r.endpoint(r.Src, r.SrcIP), Destination: r.endpoint(r.Dst, r.DstIP),
		Protocol: ProtocolName(r.Proto), SrcPort: r.SrcPort, DstPort: r.DstPort,
		Service: r.Service, Policies: r.Policies, Packets: r.Packets, Bytes: r.Bytes,
		DNS: r.DNS, IsReply: r.IsReply(),
	}
	switch r.Proto {
	case 1: // ICMP: type and code where the ports would be
		f.ICMPType, f.ICMPCode = uint8(r.SrcPort>>8), uint8(r.SrcPort)
		f.SrcPort, f.DstPort = 0, 0
	case 6:
		f.TCPFlags = &tcpFlagSets[r.TCPFlags&tcpFlagBits]
	}
}

// endpoint is the Endpoint of a pod, or of an address alone; none when the datapath
// read no addresses.
func (r *Record) endpoint(ep *Endpoint, ip [4]byte) Endpoint {
	if ep != nil {
		return *ep
	}
	if r.SrcIP == [4]byte{} && r.DstIP == [4]byte{} {
		return Endpoint{}
	}
	return Endpoint{IP: netip.AddrFrom4(ip).String()}
}
