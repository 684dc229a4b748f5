package flowstore

import (
	"net/netip"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/flow"
)

// Resolver names what the node knows about an address: the pod that has it
// (namespace, name, labels, node) and the Service a frontend belongs to.
type Resolver interface {
	// Endpoint returns the pod with ip, its IP set, or nil. Flows share it: it is
	// never changed once returned.
	Endpoint(ip netip.Addr) *flow.Endpoint
	// Service names the Service of frontend ("namespace/name"), "" if none.
	Service(frontend netip.AddrPort, proto uint8) string
}

// Origin is what a node adds to every flow: its name and host-routing mode.
type Origin struct {
	Node        string
	HostRouting string // "bpf" or "legacy"
}

// Convert turns a datapath flow record into a Flow, resolving its addresses with res.
func Convert(rec datapath.FlowRecord, o Origin, res Resolver) *flow.Flow {
	var r flow.Record
	recordInto(&r, &rec, res)
	f := new(flow.Flow)
	r.Into(f, o.Node, o.HostRouting)
	return f
}

// recordInto turns a datapath flow record into r (overwritten whole), resolving its
// addresses with res: Feed writes straight into the store's slots.
func recordInto(r *flow.Record, rec *datapath.FlowRecord, res Resolver) {
	*r = flow.Record{
		Time: rec.Time.UnixNano(), Type: flow.TypeL3L4, Direction: direction(rec.Direction),
		Proto: rec.Proto, SrcPort: rec.SrcPort, DstPort: rec.DstPort, TCPFlags: rec.TCPFlags,
		Packets: rec.Packets, Bytes: rec.Bytes,
	}
	if rec.Src.Is4() {
		r.SrcIP, r.Src = rec.Src.As4(), resolve(res, rec.Src)
	}
	if rec.Dst.Is4() {
		r.DstIP, r.Dst = rec.Dst.As4(), resolve(res, rec.Dst)
	}
	if rec.Proto != 6 {
		r.TCPFlags = 0
	}
	if rec.Service.IsValid() && res != nil {
		r.Service = res.Service(rec.Service, rec.Proto)
	}
	switch rec.Kind {
	case datapath.FlowDrop:
		r.Type, r.DropReason = flow.TypeDrop, rec.Reason
	case datapath.FlowDNS:
		if d, err := flow.ParseDNS(rec.Payload); err == nil {
			r.Type, r.DNS = flow.TypeDNS, d
		}
	}
}

func resolve(res Resolver, ip netip.Addr) *flow.Endpoint {
	if res == nil {
		return nil
	}
	return res.Endpoint(ip)
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
