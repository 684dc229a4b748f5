package datapath

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// NodePortFlow is one NodePort flow to a backend on another node, as the
// NodePort SNAT tables hold it: Client:ClientPort reached node IP:NodePort and
// talks to Backend:BackendPort as node IP:NATPort.
type NodePortFlow struct {
	Proto       uint8
	Client      netip.Addr
	ClientPort  uint16
	NodePort    uint16
	Backend     netip.Addr
	BackendPort uint16
	NATPort     uint16
	BackendID   uint32 // 0 when only the reverse entry is left
	// Established is true in myelin_nodeport_nat (TCP handshake completed)
	// and myelin_nodeport_udp (UDP flows the backend answered), false in
	// the embryonic LRU myelin_nodeport_syn.
	Established bool
	// LastSeen is on the clock of MonotonicNow, accurate to a second.
	LastSeen time.Duration
	// State is "tcp-syn", "tcp-established", "tcp-closing" or "udp", as for NATEntry.
	State string
}

// NodePortStats are the counters of the NodePort SNAT tables since they
// were created, summed over CPUs.
type NodePortStats struct {
	// Created counts flows created in myelin_nodeport_syn (a SYN flood
	// creates one per forged source).
	Created uint64
	// Promoted counts TCP flows that completed their handshake and moved to
	// myelin_nodeport_nat.
	Promoted uint64
	// RepliesLost counts replies of pods to a NAT port without a flow: their
	// embryonic flow was evicted (or reclaimed) before the backend answered.
	RepliesLost uint64
	// UDPAnswered counts UDP flows the backend answered that moved to
	// myelin_nodeport_udp (the client sent again after a reply).
	UDPAnswered uint64
	// Embryonic is how many flows myelin_nodeport_syn holds now (two entries each).
	Embryonic uint64
}

// NodePortFlows returns the flows of the NodePort SNAT tables, established
// (TCP, then answered UDP) first, each ordered by client and ports. Half
// flows (one entry evicted or collected) are listed too.
func (d *Datapath) NodePortFlows() ([]NodePortFlow, error) {
	var out []NodePortFlow
	for _, t := range d.nodePortTables() {
		flows, err := t.read()
		if err != nil {
			return nil, err
		}
		n := len(out)
		for id, f := range flows {
			out = append(out, nodePortFlow(id, f))
		}
		slices.SortFunc(out[n:], func(a, b NodePortFlow) int {
			return cmp.Or(a.Client.Compare(b.Client), cmp.Compare(a.ClientPort, b.ClientPort),
				cmp.Compare(a.NodePort, b.NodePort), cmp.Compare(a.Proto, b.Proto))
		})
	}
	return out, nil
}

// GCNodePortNAT deletes the established NodePort SNAT flows (both entries;
// TCP and answered UDP) idle longer than their state's timeout at now (the
// NAT timeouts), as GCNAT does for masquerade, and returns how many entries
// it removed. The answered UDP flows' table is an LRU, but an idle flow
// there still holds its NAT port until collected. Embryonic flows need no
// collection: their table is an LRU, and the datapath reclaims a port held
// by an embryonic flow idle 5 seconds. The first round after Load also
// moves the UDP flows an older version left in myelin_nodeport_nat
// (moveOldUDP); a datapath OpenPinned adopted leaves them to the programs
// that run, which look nowhere else.
func (d *Datapath) GCNodePortNAT(now time.Duration) (int, error) {
	var errs []error
	if d.objs.MyelinFromNetdev != nil && !d.oldUDPMoved.Load() {
		err := d.moveOldUDP()
		d.oldUDPMoved.Store(err == nil)
		errs = append(errs, err)
	}
	removed := 0
	for _, t := range d.nodePortTables()[:2] {
		n, err := t.gc(now)
		removed += n
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// dropStaleUDP deletes, at Load, the flows of a pinned myelin_nodeport_udp
// whose reverse tuple myelin_nodeport_syn or myelin_nodeport_nat holds too:
// an older version ran since they were written (a downgrade, then this
// upgrade), which neither refreshed nor collected them and gave their ports
// to flows of its own; kept, they would take those flows' replies (the
// datapath looks UDP up in myelin_nodeport_udp first). Other flows there
// stay (the GC collects them once idle).
func (d *Datapath) dropStaleUDP(created []string) error {
	if slices.Contains(created, "myelin_nodeport_udp") {
		return nil
	}
	var stale []myelinNatKey
	err := dumpEntries(d.objs.MyelinNodeportUdp, func(k myelinNatKey, v myelinNpEntry) {
		if k.Dir != uint8(myelinNatDirNAT_DIR_INGRESS) {
			return
		}
		var other myelinNpEntry
		if d.objs.MyelinNodeportSyn.Lookup(k, &other) == nil || d.objs.MyelinNodeportNat.Lookup(k, &other) == nil {
			stale = append(stale, npPairKey(k, v), k)
		}
	})
	if err != nil {
		return fmt.Errorf("read myelin_nodeport_udp: %w", err)
	}
	for _, k := range stale {
		if err := d.objs.MyelinNodeportUdp.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete a stale flow of myelin_nodeport_udp: %w", err)
		}
	}
	return nil
}

// npEntry is one entry of a NodePort SNAT table.
type npEntry struct {
	k myelinNatKey
	v myelinNpEntry
}

// npPairKey is the key of the other entry of the flow whose entry v has key
// k, as the datapath's np_pair_key makes it: the backend's reply tuple from
// a forward entry, the client's tuple from a reverse one.
func npPairKey(k myelinNatKey, v myelinNpEntry) myelinNatKey {
	dir := myelinNatDirNAT_DIR_INGRESS
	if k.Dir == uint8(myelinNatDirNAT_DIR_INGRESS) {
		dir = myelinNatDirNAT_DIR_EGRESS
	}
	return myelinNatKey{Saddr: v.Addr, Daddr: k.Daddr, Sport: v.Port, Dport: v.Xport, Proto: k.Proto, Dir: uint8(dir)}
}

// moveOldUDP moves the UDP flows in myelin_nodeport_nat, which versions
// before 2026-12-07 moved there after a reply, to the LRU
// myelin_nodeport_udp, reverse entries first (the datapath looks UDP up
// there first, and finds a forward entry only with its reverse one): left
// there, a forger's datagrams would keep them from the GC and TCP's table
// full.
func (d *Datapath) moveOldUDP() error {
	var rev, fwd []npEntry
	err := dumpEntries(d.objs.MyelinNodeportNat, func(k myelinNatKey, v myelinNpEntry) {
		switch {
		case k.Proto != unix.IPPROTO_UDP:
		case k.Dir == uint8(myelinNatDirNAT_DIR_INGRESS):
			rev = append(rev, npEntry{k, v})
		default:
			fwd = append(fwd, npEntry{k, v})
		}
	})
	if err != nil {
		return fmt.Errorf("read myelin_nodeport_nat: %w", err)
	}
	// leaving: the entries that leave myelin_nodeport_nat, true when copied
	// to myelin_nodeport_udp, false when their flow ends.
	leaving, errs := d.moveOldUDPReverse(rev)
	for _, e := range fwd {
		copied, ok := leaving[npPairKey(e.k, e.v)]
		if !ok {
			continue // its reverse entry stays: so does it
		}
		if copied {
			if err := d.objs.MyelinNodeportUdp.Update(e.k, e.v, ebpf.UpdateAny); err != nil {
				errs = append(errs, fmt.Errorf("move a UDP flow to myelin_nodeport_udp: %w", err))
				continue
			}
		}
		leaving[e.k] = copied
	}
	// Forward entries first: a datagram finds its flow in one table or the other.
	for _, e := range append(fwd, rev...) {
		if _, ok := leaving[e.k]; !ok {
			continue
		}
		if err := d.objs.MyelinNodeportNat.Delete(e.k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("delete a moved UDP flow from myelin_nodeport_nat: %w", err))
		}
	}
	return errors.Join(errs...)
}

// moveOldUDPReverse copies the reverse entries rev of old UDP flows to
// myelin_nodeport_udp and returns which leave myelin_nodeport_nat: true when
// copied, false when a flow of myelin_nodeport_udp holds the tuple too
// (only a downgrade lets that happen: it keeps it, this flow ends). An entry
// is copied only while myelin_nodeport_nat still holds it as dumped: the
// datapath may have forgotten its flow since, and a new flow claimed the
// port (a stale copy would take that flow's replies).
func (d *Datapath) moveOldUDPReverse(rev []npEntry) (map[myelinNatKey]bool, []error) {
	var errs []error
	leaving := map[myelinNatKey]bool{}
	for _, e := range rev {
		err := d.objs.MyelinNodeportUdp.Update(e.k, e.v, ebpf.UpdateNoExist)
		if errors.Is(err, ebpf.ErrKeyExist) {
			leaving[e.k] = false
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("move a UDP flow to myelin_nodeport_udp: %w", err))
			continue
		}
		var now myelinNpEntry
		if d.objs.MyelinNodeportNat.Lookup(e.k, &now) != nil || now.Addr != e.v.Addr || now.Port != e.v.Port || now.Xport != e.v.Xport {
			_ = d.objs.MyelinNodeportUdp.Delete(e.k)
			continue
		}
		leaving[e.k] = true
	}
	return leaving, errs
}

// NodePortStats reads the NodePort SNAT counters.
func (d *Datapath) NodePortStats() (NodePortStats, error) {
	var st NodePortStats
	// In enum np_stat's order.
	if err := sumPerCPU(d.objs.MyelinNodeportStats, "myelin_nodeport_stats", &st.Created, &st.Promoted, &st.RepliesLost, &st.UDPAnswered); err != nil {
		return st, err
	}
	n, err := countEntries(d.objs.MyelinNodeportSyn)
	if err != nil {
		return st, fmt.Errorf("count myelin_nodeport_syn: %w", err)
	}
	st.Embryonic = uint64(n / 2)
	return st, nil
}

// nodePortTables are the NodePort SNAT tables as flow tables, in this order:
// myelin_nodeport_nat (established TCP), myelin_nodeport_udp (answered UDP)
// and myelin_nodeport_syn (embryonic); a flow's Established says whether
// it is in one of the first two.
func (d *Datapath) nodePortTables() []flowTable[myelinNatKey, myelinNpEntry, NodePortFlow] {
	table := func(name string, m *ebpf.Map, established bool) flowTable[myelinNatKey, myelinNpEntry, NodePortFlow] {
		return flowTable[myelinNatKey, myelinNpEntry, NodePortFlow]{name: name, m: m,
			timeout: func(id NodePortFlow, flags uint16) time.Duration { return natTimeout(id.Proto, flags) },
			flowOf: func(k myelinNatKey, v myelinNpEntry) (NodePortFlow, bool) {
				id, forward := npFlowOf(k, v)
				id.Established = established
				return id, forward
			}}
	}
	return []flowTable[myelinNatKey, myelinNpEntry, NodePortFlow]{
		table("myelin_nodeport_nat", d.objs.MyelinNodeportNat, true),
		table("myelin_nodeport_udp", d.objs.MyelinNodeportUdp, true),
		table("myelin_nodeport_syn", d.objs.MyelinNodeportSyn, false),
	}
}

// nodePortFlow completes the flow id with what its entries say.
func nodePortFlow(id NodePortFlow, f *pairedFlow[myelinNatKey, myelinNpEntry]) NodePortFlow {
	if f.fwd != nil {
		id.BackendID = f.fwdValue.BackendId
	}
	id.LastSeen, id.State = time.Duration(f.lastSeen), natState(id.Proto, f.flags)
	return id
}

// npFlowOf is the flow an entry belongs to (without BackendID, time and
// state, so both entries map to the same value).
func npFlowOf(k myelinNatKey, v myelinNpEntry) (f NodePortFlow, forward bool) {
	f = NodePortFlow{Proto: k.Proto}
	if k.Dir == uint8(myelinNatDirNAT_DIR_EGRESS) {
		f.Client, f.ClientPort = addrFromNetwork(k.Saddr), ntohs(k.Sport)
		f.NodePort = ntohs(k.Dport)
		f.Backend, f.BackendPort = addrFromNetwork(v.Addr), ntohs(v.Port)
		f.NATPort = ntohs(v.Xport)
		return f, true
	}
	f.Backend, f.BackendPort = addrFromNetwork(k.Saddr), ntohs(k.Sport)
	f.NATPort = ntohs(k.Dport)
	f.Client, f.ClientPort = addrFromNetwork(v.Addr), ntohs(v.Port)
	f.NodePort = ntohs(v.Xport)
	return f, false
}
