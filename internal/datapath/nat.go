package datapath

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// How long a masqueraded flow may stay idle, by state, before GCNAT removes
// its NAT entries. A TCP flow is "syn" until a reply comes back, then
// "established" until a FIN or RST in either direction makes it "closing".
// Established: past Linux's default keepalive time (2 h) and its first probe,
// so an idle connection with keepalive on keeps its port (after the entry
// goes, the probe leaves with the pod's address and the connection hangs).
const (
	NATTimeoutTCPSyn         = 60 * time.Second
	NATTimeoutTCPEstablished = 2*time.Hour + 15*time.Minute
	NATTimeoutTCPClosing     = 10 * time.Second
	NATTimeoutUDP            = 60 * time.Second
	NATTimeoutICMP           = 10 * time.Second
)

// NATEntry is one masqueraded flow: the pod's PodIP:PodPort talks to
// Dst:DstPort as node IP:NATPort. For ICMP echo the ports are the echo id
// (PodPort, NATPort) and DstPort is 0.
type NATEntry struct {
	Proto   uint8
	PodIP   netip.Addr
	PodPort uint16
	NATPort uint16
	Dst     netip.Addr
	DstPort uint16
	// LastSeen is the time of a recent packet of the flow, in either
	// direction, on the clock of MonotonicNow (accurate to a second).
	LastSeen time.Duration
	// State is "tcp-syn", "tcp-established", "tcp-closing", "udp" or "icmp".
	State string
}

// natFlowID identifies a flow whichever of its entries it is read from.
type natFlowID struct {
	proto                     uint8
	pod, dst                  netip.Addr
	podPort, natPort, dstPort uint16
}

// NATEntries returns the masqueraded flows, one per flow, ordered by pod,
// destination and ports. A flow with only one of its two entries left (a
// lost race, an interrupted GC) is listed too.
func (d *Datapath) NATEntries() ([]NATEntry, error) {
	flows, err := d.natTable().read()
	if err != nil {
		return nil, err
	}
	out := make([]NATEntry, 0, len(flows))
	for id, f := range flows {
		out = append(out, NATEntry{Proto: id.proto, PodIP: id.pod, PodPort: id.podPort, NATPort: id.natPort,
			Dst: id.dst, DstPort: id.dstPort, LastSeen: time.Duration(f.lastSeen), State: natState(id.proto, f.flags)})
	}
	slices.SortFunc(out, compareNATEntries)
	return out, nil
}

// compareNATEntries orders flows by pod, destination, protocol and ports.
func compareNATEntries(a, b NATEntry) int {
	return cmp.Or(a.PodIP.Compare(b.PodIP), a.Dst.Compare(b.Dst), cmp.Compare(a.Proto, b.Proto),
		cmp.Compare(a.PodPort, b.PodPort), cmp.Compare(a.DstPort, b.DstPort), cmp.Compare(a.NATPort, b.NATPort))
}

// GCNAT deletes the entries (both directions) of every masqueraded flow idle
// longer than its state's timeout at now, a time on the MonotonicNow clock,
// and returns how many map entries it removed. The agent runs it
// periodically; it is what frees room in a full NAT map. A flow is re-read
// just before deletion, so one that saw a packet during the walk is kept.
// With a NATPodMax it then lists the pods holding more flows than that in
// myelin_snat_over (natBudget, budget.go), and when the table is still nearly
// full, ends their flows beyond it (flowTable.gcBudget).
func (d *Datapath) GCNAT(now time.Duration) (int, error) {
	budget := d.natBudget()
	n, held, err := d.natTable().gcBudget(now, func(id natFlowID) netip.Addr { return id.pod }, budget.max)
	if err != nil {
		return n, err
	}
	return n, budget.sync(held)
}

// natTable is myelin_snat as a flow table.
func (d *Datapath) natTable() flowTable[myelinNatKey, myelinNatEntry, natFlowID] {
	return flowTable[myelinNatKey, myelinNatEntry, natFlowID]{name: "myelin_snat", m: d.objs.MyelinSnat,
		flowOf:  natFlowOf,
		timeout: func(id natFlowID, flags uint16) time.Duration { return natTimeout(id.proto, flags) }}
}

// MonotonicNow is the current time on the clock of the datapath's
// timestamps: the now to pass to GCNAT. CLOCK_MONOTONIC; the programs write
// CLOCK_MONOTONIC_COARSE (bpf/lib/clock.h), which trails it by at most a
// tick, so an entry's age is never negative here.
func MonotonicNow() time.Duration {
	var ts unix.Timespec
	// CLOCK_MONOTONIC can't fail on Linux.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// natTimeouts are the idle timeouts by natState.
var natTimeouts = map[string]time.Duration{
	"tcp-syn": NATTimeoutTCPSyn, "tcp-established": NATTimeoutTCPEstablished, "tcp-closing": NATTimeoutTCPClosing,
	"udp": NATTimeoutUDP, "icmp": NATTimeoutICMP,
}

// natTimeout is the idle timeout of a flow of proto in state flags.
func natTimeout(proto uint8, flags uint16) time.Duration { return natTimeouts[natState(proto, flags)] }

// natState names the state of a flow of proto with flags.
func natState(proto uint8, flags uint16) string {
	switch proto {
	case unix.IPPROTO_TCP:
		switch {
		case flags&uint16(myelinNatFlagsNAT_F_CLOSING) != 0:
			return "tcp-closing"
		case flags&uint16(myelinNatFlagsNAT_F_REPLIED) != 0:
			return "tcp-established"
		}
		return "tcp-syn"
	case unix.IPPROTO_UDP:
		return "udp"
	}
	return "icmp"
}

// natFlowOf is the flow an entry belongs to. The forward entry is keyed by
// the pod's tuple and holds the NAT port; the reverse entry is keyed by the
// reply's tuple (destination, node IP, ports swapped) and holds the pod's.
func natFlowOf(k myelinNatKey, v myelinNatEntry) (id natFlowID, forward bool) {
	id = natFlowID{proto: k.Proto}
	if k.Dir == uint8(myelinNatDirNAT_DIR_EGRESS) {
		id.pod, id.podPort = addrFromNetwork(k.Saddr), ntohs(k.Sport)
		id.dst, id.dstPort = addrFromNetwork(k.Daddr), ntohs(k.Dport)
		id.natPort = ntohs(v.Port)
		return id, true
	}
	id.dst, id.dstPort = addrFromNetwork(k.Saddr), ntohs(k.Sport)
	id.natPort = ntohs(k.Dport)
	id.pod, id.podPort = addrFromNetwork(v.Addr), ntohs(v.Port)
	return id, false
}
