package datapath

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"
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
	// Established is true in myelin_nodeport_nat (handshake completed),
	// false in the embryonic LRU myelin_nodeport_syn.
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
	// Promoted counts flows that completed their handshake and moved to
	// myelin_nodeport_nat.
	Promoted uint64
	// RepliesLost counts replies of pods to a NAT port without a flow: their
	// embryonic flow was evicted (or reclaimed) before the backend answered.
	RepliesLost uint64
	// Embryonic is how many flows myelin_nodeport_syn holds now (two entries each).
	Embryonic uint64
}

// npFlow is both entries of one flow in one table.
type npFlow struct {
	flow     NodePortFlow
	fwd, rev *myelinNatKey
	lastSeen uint64
	flags    uint16
}

// NodePortFlows returns the flows of both NodePort SNAT tables, established
// first, each ordered by client and ports. Half flows (one entry evicted or
// collected) are listed too.
func (d *Datapath) NodePortFlows() ([]NodePortFlow, error) {
	var out []NodePortFlow
	for _, est := range []bool{true, false} {
		flows, err := d.readNodePort(est)
		if err != nil {
			return nil, err
		}
		n := len(out)
		for _, f := range flows {
			out = append(out, f.flow)
		}
		slices.SortFunc(out[n:], func(a, b NodePortFlow) int {
			return cmp.Or(a.Client.Compare(b.Client), cmp.Compare(a.ClientPort, b.ClientPort),
				cmp.Compare(a.NodePort, b.NodePort), cmp.Compare(a.Proto, b.Proto))
		})
	}
	return out, nil
}

// GCNodePortNAT deletes the established NodePort SNAT flows (both entries)
// idle longer than their state's timeout at now (the NAT timeouts), as
// GCNAT does for masquerade, and returns how many entries it removed.
// Embryonic flows need no collection: their table is an LRU, and the
// datapath reclaims a port held by an embryonic flow idle 5 seconds.
func (d *Datapath) GCNodePortNAT(now time.Duration) (int, error) {
	flows, err := d.readNodePort(true)
	if err != nil {
		return 0, err
	}
	m := d.objs.MyelinNodeportNat
	removed := 0
	for _, f := range flows {
		if !npIdle(f.flow.Proto, f.lastSeen, f.flags, now) || !d.npStillIdle(f, now) {
			continue
		}
		for _, k := range []*myelinNatKey{f.fwd, f.rev} { // forward first, as GCNAT
			if k == nil {
				continue
			}
			err := m.Delete(k)
			if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return removed, fmt.Errorf("delete NodePort NAT entry of %+v: %w", f.flow, err)
			}
			if err == nil {
				removed++
			}
		}
	}
	return removed, nil
}

// npIdle reports whether a flow last seen at lastSeen with flags is past its timeout at now.
func npIdle(proto uint8, lastSeen uint64, flags uint16, now time.Duration) bool {
	last := time.Duration(lastSeen)
	return now > last && now-last > natTimeout(proto, flags)
}

// npStillIdle re-reads f's entries and reports whether it is still idle.
func (d *Datapath) npStillIdle(f *npFlow, now time.Duration) bool {
	last, flags := f.lastSeen, f.flags
	for _, k := range []*myelinNatKey{f.fwd, f.rev} {
		var v myelinNpEntry
		if k != nil && d.objs.MyelinNodeportNat.Lookup(k, &v) == nil {
			last, flags = max(last, v.LastSeen), flags|v.Flags
		}
	}
	return npIdle(f.flow.Proto, last, flags, now)
}

// NodePortStats reads the NodePort SNAT counters.
func (d *Datapath) NodePortStats() (NodePortStats, error) {
	var st NodePortStats
	for i, dst := range []*uint64{&st.Created, &st.Promoted, &st.RepliesLost} {
		var perCPU []uint64
		if err := d.objs.MyelinNodeportStats.Lookup(uint32(i), &perCPU); err != nil {
			return st, fmt.Errorf("read myelin_nodeport_stats: %w", err)
		}
		for _, v := range perCPU {
			*dst += v
		}
	}
	var (
		k myelinNatKey
		v myelinNpEntry
	)
	n, err := countEntries(d.objs.MyelinNodeportSyn, &k, &v)
	if err != nil {
		return st, fmt.Errorf("count myelin_nodeport_syn: %w", err)
	}
	st.Embryonic = uint64(n / 2)
	return st, nil
}

// readNodePort reads one NodePort SNAT table and pairs its entries into flows.
func (d *Datapath) readNodePort(established bool) (map[NodePortFlow]*npFlow, error) {
	m := d.objs.MyelinNodeportSyn
	if established {
		m = d.objs.MyelinNodeportNat
	}
	var (
		k myelinNatKey
		v myelinNpEntry
	)
	flows := make(map[NodePortFlow]*npFlow)
	it := m.Iterate()
	for it.Next(&k, &v) {
		id := npFlowOf(k, v)
		id.Established = established
		f := flows[id]
		if f == nil {
			f = &npFlow{flow: id}
			flows[id] = f
		}
		key := k
		if k.Dir == uint8(myelinNatDirNAT_DIR_EGRESS) {
			f.fwd = &key
			f.flow.BackendID = v.BackendId
		} else {
			f.rev = &key
		}
		f.lastSeen = max(f.lastSeen, v.LastSeen)
		f.flags |= v.Flags
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read NodePort NAT table: %w", err)
	}
	for _, f := range flows {
		f.flow.LastSeen = time.Duration(f.lastSeen)
		f.flow.State = natState(f.flow.Proto, f.flags)
	}
	return flows, nil
}

// npFlowOf is the flow an entry belongs to (without BackendID, time and
// state, so both entries map to the same value).
func npFlowOf(k myelinNatKey, v myelinNpEntry) NodePortFlow {
	f := NodePortFlow{Proto: k.Proto}
	if k.Dir == uint8(myelinNatDirNAT_DIR_EGRESS) {
		f.Client, f.ClientPort = addrFromNetwork(k.Saddr), ntohs(k.Sport)
		f.NodePort = ntohs(k.Dport)
		f.Backend, f.BackendPort = addrFromNetwork(v.Addr), ntohs(v.Port)
		f.NATPort = ntohs(v.Xport)
		return f
	}
	f.Backend, f.BackendPort = addrFromNetwork(k.Saddr), ntohs(k.Sport)
	f.NATPort = ntohs(k.Dport)
	f.Client, f.ClientPort = addrFromNetwork(v.Addr), ntohs(v.Port)
	f.NodePort = ntohs(v.Xport)
	return f
}
