package flowstore

import (
	"encoding/binary"
	"net/netip"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/flow"
)

// Resolver names what the node knows about an address: the pod that has it
// (namespace, name, labels, node) and the Service a frontend belongs to.
type Resolver interface {
	// Endpoint returns the pod with ip (IP filled in either way).
	Endpoint(ip netip.Addr) flow.Endpoint
	// Service names the Service of frontend ("namespace/name"), "" if none.
	Service(frontend netip.AddrPort, proto uint8) string
}

// Origin is what a node adds to every flow: its name and host-routing mode.
type Origin struct {
	Node        string
	HostRouting string // "bpf" or "legacy"
}

// TCP flag bits of the TCP header's flags byte.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpPSH = 0x08
	tcpACK = 0x10
)

// Convert turns a datapath flow record into a Flow, resolving its addresses with res.
func Convert(rec datapath.FlowRecord, o Origin, res Resolver) *flow.Flow {
	return convert(rec, o, res, nil)
}

// convert is Convert with the address strings of names (nil: formatted each time).
func convert(rec datapath.FlowRecord, o Origin, res Resolver, names *addrNames) *flow.Flow {
	f := new(flow.Flow)
	convertInto(f, rec, o, res, names)
	return f
}

// convertInto is convert into f (overwritten whole): Feed reuses one Flow for every
// record, and the store keeps a copy.
func convertInto(f *flow.Flow, rec datapath.FlowRecord, o Origin, res Resolver, names *addrNames) {
	*f = flow.Flow{
		Time: rec.Time, Node: o.Node, HostRouting: o.HostRouting,
		Type: flow.TypeL3L4, Verdict: flow.Forwarded, Direction: direction(rec.Direction),
		Protocol: flow.ProtocolName(rec.Proto), SrcPort: rec.SrcPort, DstPort: rec.DstPort,
		Packets: rec.Packets, Bytes: rec.Bytes,
	}
	f.Source, f.Destination = endpoint(rec.Src, res, names), endpoint(rec.Dst, res, names)
	switch rec.Proto {
	case 1: // ICMP: the datapath reports type and code where the ports would be
		f.ICMPType, f.ICMPCode = uint8(rec.SrcPort>>8), uint8(rec.SrcPort)
		f.SrcPort, f.DstPort = 0, 0
	case 6:
		f.TCPFlags = tcpFlags(rec.TCPFlags)
		f.IsReply = rec.TCPFlags&(tcpSYN|tcpACK) == tcpSYN|tcpACK
	}
	if rec.Service.IsValid() && res != nil {
		f.Service = res.Service(rec.Service, rec.Proto)
	}
	switch rec.Kind {
	case datapath.FlowDrop:
		f.Type, f.Verdict, f.DropReason = flow.TypeDrop, flow.Dropped, rec.Reason
	case datapath.FlowDNS:
		if d, err := flow.ParseDNS(rec.Payload); err == nil {
			f.Type, f.DNS = flow.TypeDNS, d
			f.IsReply = d.Response
		}
	}
}

func endpoint(ip netip.Addr, res Resolver, names *addrNames) flow.Endpoint {
	if !ip.IsValid() {
		return flow.Endpoint{}
	}
	if res == nil {
		return flow.Endpoint{IP: names.name(ip)}
	}
	ep := res.Endpoint(ip)
	ep.IP = names.name(ip)
	return ep
}

// addrNamesMax bounds an addrNames; past it, it starts over.
const addrNamesMax = 4096

// addrNames keeps the strings of addresses seen: the feeding goroutine's, so the
// addresses of a node's busy pods are formatted once, not twice per record. Keyed by
// the IPv4 address as a number (the datapath reports IPv4 only): a 4-byte key hashes
// several times faster than a netip.Addr's 24 bytes.
type addrNames map[uint32]string

// name is ip.String(), kept in n (a nil *addrNames keeps nothing).
func (n *addrNames) name(ip netip.Addr) string {
	if n == nil || !ip.Is4() {
		return ip.String()
	}
	a := ip.As4()
	k := binary.BigEndian.Uint32(a[:])
	if s, ok := (*n)[k]; ok {
		return s
	}
	if *n == nil || len(*n) >= addrNamesMax {
		*n = addrNames{}
	}
	s := ip.String()
	(*n)[k] = s
	return s
}

// direction is the flow's direction relative to the pod: leaving it (from-pod) is
// egress; delivered into it is ingress. Drops on the uplink's egress are egress too.
func direction(dir string) flow.Direction {
	switch dir {
	case "from-pod", "to-netdev":
		return flow.Egress
	case "to-pod", "from-netdev", "from-overlay":
		return flow.Ingress
	}
	return ""
}

// tcpFlags returns the flags of b, shared by every flow with the same flags (a
// stored flow is never changed, so they are read-only): one allocation less per record.
func tcpFlags(b uint8) *flow.TCPFlags {
	return &tcpFlagSets[b&tcpFlagBits]
}

// tcpFlagBits are the flags a Flow carries.
const tcpFlagBits = tcpFIN | tcpSYN | tcpRST | tcpPSH | tcpACK

// tcpFlagSets are the TCPFlags of every combination of tcpFlagBits, by flags byte.
var tcpFlagSets = func() (t [tcpFlagBits + 1]flow.TCPFlags) {
	for b := range t {
		t[b] = flow.TCPFlags{SYN: b&tcpSYN != 0, ACK: b&tcpACK != 0, FIN: b&tcpFIN != 0, RST: b&tcpRST != 0, PSH: b&tcpPSH != 0}
	}
	return t
}()
