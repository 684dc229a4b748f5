package flowstore

import (
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
	f := &flow.Flow{
		Time: rec.Time, Node: o.Node, HostRouting: o.HostRouting,
		Type: flow.TypeL3L4, Verdict: flow.Forwarded, Direction: direction(rec.Direction),
		Protocol: flow.ProtocolName(rec.Proto), SrcPort: rec.SrcPort, DstPort: rec.DstPort,
		Packets: rec.Packets, Bytes: rec.Bytes,
	}
	f.Source, f.Destination = endpoint(rec.Src, res), endpoint(rec.Dst, res)
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
	return f
}

func endpoint(ip netip.Addr, res Resolver) flow.Endpoint {
	if !ip.IsValid() {
		return flow.Endpoint{}
	}
	if res == nil {
		return flow.Endpoint{IP: ip.String()}
	}
	ep := res.Endpoint(ip)
	ep.IP = ip.String()
	return ep
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

func tcpFlags(b uint8) *flow.TCPFlags {
	return &flow.TCPFlags{SYN: b&tcpSYN != 0, ACK: b&tcpACK != 0, FIN: b&tcpFIN != 0, RST: b&tcpRST != 0, PSH: b&tcpPSH != 0}
}
