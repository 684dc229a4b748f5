package datapath

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// How long a load-balanced flow may stay idle, by state, before GCServiceCT
// removes its conntrack entries. A TCP flow is "syn" until the client sends a
// segment other than SYN after it (the handshake completed), then
// "established" until a FIN or RST in either direction makes it "closing".
// An idle flow that is collected and then sends again is a new flow: it
// chooses a backend again (the same one with Maglev or affinity while the
// Service is unchanged).
const (
	ServiceCTTimeoutTCPSyn         = 60 * time.Second
	ServiceCTTimeoutTCPEstablished = 6 * time.Hour
	ServiceCTTimeoutTCPClosing     = 10 * time.Second
	ServiceCTTimeoutUDP            = 60 * time.Second
)

// ServiceCTMaxTimeout is the longest a conntrack entry can outlive its last
// packet, GC interval aside: how long the service manager keeps a deleted
// backend or frontend id out of use.
const ServiceCTMaxTimeout = ServiceCTTimeoutTCPEstablished

// ctFlowID identifies a load-balanced flow whichever of its entries it is
// read from: the client's tuple to the frontend.
type ctFlowID struct {
	proto                 uint8
	client, front         netip.Addr
	clientPort, frontPort uint16
}

// GCServiceCT deletes the conntrack entries (both directions) of every
// load-balanced flow, in myelin_lb_ct and the NodePort tables
// (nodePortCTTables), idle longer than its state's timeout at now, a time on the MonotonicNow clock, and
// returns how many map entries it removed. The agent runs it periodically
// next to GCNAT; it is what frees room in a full table. A flow is re-read
// just before deletion, so one that saw a packet during the walk is kept.
// With an LBCTPodMax it then lists the pods holding more flows than that in
// myelin_lb_ct in myelin_lb_ct_over (lbCTBudget, budget.go), and when that table is
// still nearly full, ends their flows beyond it (flowTable.gcBudget).
func (d *Datapath) GCServiceCT(now time.Duration) (int, error) {
	budget := d.lbCTBudget()
	n, held, err := ctTable("myelin_lb_ct", d.objs.MyelinLbCt).gcBudget(now,
		func(id ctFlowID) netip.Addr { return id.client }, budget.max)
	// NodePort clients are no pods of this node: those tables have no budget.
	// The LRU evicts only when full: idle flows in it are collected too, so
	// no stale reverse entry outlives the timeouts.
	var nerrs []error
	np := 0
	for _, t := range d.nodePortCTTables() {
		m, err := t.gc(now)
		np, nerrs = np+m, append(nerrs, err)
	}
	// The pods' budget list follows myelin_lb_ct's round whatever the NodePort tables did.
	if err != nil {
		return n + np, errors.Join(err, errors.Join(nerrs...))
	}
	return n + np, errors.Join(budget.sync(held), errors.Join(nerrs...))
}

// ServiceBackend is a backend (its id) of a frontend (its Service.ID), as a
// forward Service conntrack entry names the two.
type ServiceBackend struct{ Service, Backend uint32 }

// EndServiceFlows deletes the conntrack entries (both directions), in
// myelin_lb_ct and the NodePort tables, of every load-balanced flow whose
// forward entry names one of pairs, and returns how many map entries it
// removed. The next packet of such a flow chooses a backend again, as when
// its backend is deleted: the service manager ends so the flows of a backend
// that left a frontend while other frontends keep it (same id, so the flows
// would go on to it). One walk of each table; nothing to do for no pairs.
func (d *Datapath) EndServiceFlows(pairs map[ServiceBackend]bool) (int, error) {
	if len(pairs) == 0 {
		return 0, nil
	}
	end := func(v myelinCtEntry) bool { return pairs[ServiceBackend{Service: v.SvcId, Backend: v.BackendId}] }
	return d.eachServiceCT(func(t flowTable[myelinCtKey, myelinCtEntry, ctFlowID]) (int, error) { return t.deleteFlows(end) })
}

// eachServiceCT runs do on each Service conntrack table (myelin_lb_ct and
// the NodePort tables), and returns how many entries it removed in all.
func (d *Datapath) eachServiceCT(do func(flowTable[myelinCtKey, myelinCtEntry, ctFlowID]) (int, error)) (int, error) {
	var errs []error
	removed := 0
	for _, t := range append([]flowTable[myelinCtKey, myelinCtEntry, ctFlowID]{ctTable("myelin_lb_ct", d.objs.MyelinLbCt)}, d.nodePortCTTables()...) {
		n, err := do(t)
		removed += n
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// nodePortCTTables are the conntrack tables of NodePort flows to local
// backends (bpf/lib/nodeport_ct.h): myelin_lb_ct_nodeport, the TCP flows
// whose backend answered, and the LRU myelin_lb_ct_nodeport_syn, the flows
// awaiting that answer and UDP flows.
func (d *Datapath) nodePortCTTables() []flowTable[myelinCtKey, myelinCtEntry, ctFlowID] {
	return []flowTable[myelinCtKey, myelinCtEntry, ctFlowID]{
		ctTable("myelin_lb_ct_nodeport", d.objs.MyelinLbCtNodeport), ctTable("myelin_lb_ct_nodeport_syn", d.objs.MyelinLbCtNodeportSyn),
	}
}

// moveNodePortUnproven moves the flows of myelin_lb_ct_nodeport that no
// client proved its own to the LRU myelin_lb_ct_nodeport_syn, where the
// datapath keeps such flows (bpf/lib/nodeport_ct.h):
//   - UDP flows, at every load: the datapath looks UDP up in the LRU only,
//     and an older datapath's programs may write some after the load that
//     created the LRU;
//   - when this load created the LRU (an upgrade from a datapath without it),
//     TCP flows whose reverse entry still awaits its backend: a SYN flood's
//     entries the older datapath kept, which would otherwise count as proven.
//     (A layout change that replaces the LRU moves promoted flows still
//     awaiting too; their client's next ACK moves them back.)
//
// Both entries of a flow move. Best effort: an entry the LRU refuses stays
// (its flow chooses again), never failing a load.
func (d *Datapath) moveNodePortUnproven(created []string) error {
	upgrade := slices.Contains(created, "myelin_lb_ct_nodeport_syn")
	all := map[myelinCtKey]myelinCtEntry{}
	err := dumpEntries(d.objs.MyelinLbCtNodeport, func(k myelinCtKey, v myelinCtEntry) { all[k] = v })
	if err != nil {
		return fmt.Errorf("move unproven flows from myelin_lb_ct_nodeport: %w", err)
	}
	// TCP first, each forward entry before its reverse one (a client packet in
	// between would rebuild a reverse entry without the awaiting flag); UDP
	// last, so an LRU too small for both evicts the flood's flows first.
	var tcp, udp []myelinCtKey
	for k, v := range all {
		switch {
		case k.Proto == unix.IPPROTO_UDP:
			udp = append(udp, k)
		case upgrade && k.Dir == uint8(myelinCtDirCT_DIR_REVERSE) && v.Flags&uint16(myelinCtFlagsCT_F_AWAITING_REPLY) != 0:
			fwd := myelinCtKey{Saddr: v.ClientAddr, Daddr: v.FrontAddr, Sport: k.Dport, Dport: v.FrontPort,
				Proto: k.Proto, Dir: uint8(myelinCtDirCT_DIR_FORWARD)}
			if _, ok := all[fwd]; ok {
				tcp = append(tcp, fwd)
			}
			tcp = append(tcp, k)
		}
	}
	for _, k := range append(tcp, udp...) {
		if d.objs.MyelinLbCtNodeportSyn.Update(k, all[k], ebpf.UpdateAny) == nil {
			_ = d.objs.MyelinLbCtNodeport.Delete(k) // gone already: the GC took it
		}
	}
	return nil
}

// ctTable is a Service conntrack map as a flow table.
func ctTable(name string, m *ebpf.Map) flowTable[myelinCtKey, myelinCtEntry, ctFlowID] {
	return flowTable[myelinCtKey, myelinCtEntry, ctFlowID]{name: name, m: m, flowOf: ctFlowOf,
		timeout: func(id ctFlowID, flags uint16) time.Duration { return ctTimeout(id.proto, flags) }}
}

// ctFlowOf is the flow an entry belongs to. The forward entry is keyed by
// the client's tuple; the reverse entry is keyed by the reply's tuple and
// holds the client and the frontend (the client's port is its dport).
func ctFlowOf(k myelinCtKey, v myelinCtEntry) (ctFlowID, bool) {
	if k.Dir == uint8(myelinCtDirCT_DIR_FORWARD) {
		return ctFlowID{proto: k.Proto, client: addrFromNetwork(k.Saddr), clientPort: ntohs(k.Sport),
			front: addrFromNetwork(k.Daddr), frontPort: ntohs(k.Dport)}, true
	}
	return ctFlowID{proto: k.Proto, client: addrFromNetwork(v.ClientAddr), clientPort: ntohs(k.Dport),
		front: addrFromNetwork(v.FrontAddr), frontPort: ntohs(v.FrontPort)}, false
}

// ctTimeout is the idle timeout of a flow of proto whose entries carry flags.
func ctTimeout(proto uint8, flags uint16) time.Duration {
	if proto != unix.IPPROTO_TCP {
		return ServiceCTTimeoutUDP
	}
	switch {
	case flags&uint16(myelinCtFlagsCT_F_CLOSING) != 0:
		return ServiceCTTimeoutTCPClosing
	case flags&uint16(myelinCtFlagsCT_F_ESTABLISHED) != 0 && flags&uint16(myelinCtFlagsCT_F_AWAITING_REPLY) == 0:
		// A NodePort flow is established only once its backend showed a completed
		// handshake (bpf/lib/ct.h, ct_backend_answered): two segments from a
		// forged source held an entry for 6 h.
		return ServiceCTTimeoutTCPEstablished
	}
	return ServiceCTTimeoutTCPSyn
}

// ConntrackIDs returns the service ids and backend ids that forward Service
// conntrack entries name, each once: ids the service manager must not reuse
// while those entries live.
func (d *Datapath) ConntrackIDs() (services, backends []uint32, err error) {
	svcs, bes := map[uint32]bool{}, map[uint32]bool{}
	for _, m := range []*ebpf.Map{d.objs.MyelinLbCt, d.objs.MyelinLbCtNodeport, d.objs.MyelinLbCtNodeportSyn} {
		// Batch lookups: an LRU churned by a flood would abort an Iterate walk.
		err := dumpEntries(m, func(k myelinCtKey, v myelinCtEntry) {
			if k.Dir == uint8(myelinCtDirCT_DIR_FORWARD) {
				svcs[v.SvcId], bes[v.BackendId] = true, true
			}
		})
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", m, err)
		}
	}
	delete(svcs, 0)
	delete(bes, 0)
	return slices.Collect(maps.Keys(svcs)), slices.Collect(maps.Keys(bes)), nil
}
