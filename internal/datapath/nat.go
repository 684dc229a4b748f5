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

// How long a masqueraded flow may stay idle, by state, before GCNAT removes
// its NAT entries. A TCP flow is "syn" until a reply comes back, then
// "established" until a FIN or RST in either direction makes it "closing".
const (
	NATTimeoutTCPSyn         = 60 * time.Second
	NATTimeoutTCPEstablished = time.Hour
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

// natFlow is both map entries of one flow, as read from myelin_snat.
type natFlow struct {
	entry    NATEntry
	fwd, rev *myelinNatKey // nil when missing
	lastSeen uint64
	flags    uint16
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
	flows, err := d.readNAT()
	if err != nil {
		return nil, err
	}
	out := make([]NATEntry, 0, len(flows))
	for _, f := range flows {
		out = append(out, f.entry)
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
func (d *Datapath) GCNAT(now time.Duration) (int, error) {
	flows, err := d.readNAT()
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, f := range flows {
		if !natIdle(f, now) || !d.stillIdle(f, now) {
			continue
		}
		// Forward first: a packet meanwhile re-creates the flow and finds
		// its own reverse entry still there, keeping its NAT port.
		for _, k := range []*myelinNatKey{f.fwd, f.rev} {
			if k == nil {
				continue
			}
			err := d.objs.MyelinSnat.Delete(k)
			if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return removed, fmt.Errorf("delete NAT entry of %+v: %w", f.entry, err)
			}
			if err == nil {
				removed++
			}
		}
	}
	return removed, nil
}

// MonotonicNow is the current time on the clock of the datapath's
// timestamps (CLOCK_MONOTONIC, bpf_ktime_get_ns): the now to pass to GCNAT.
func MonotonicNow() time.Duration {
	var ts unix.Timespec
	// CLOCK_MONOTONIC can't fail on Linux.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// natIdle reports whether f has been idle past its state's timeout at now.
func natIdle(f *natFlow, now time.Duration) bool {
	last := time.Duration(f.lastSeen)
	return now > last && now-last > natTimeout(f.entry.Proto, f.flags)
}

// stillIdle re-reads f's entries and reports whether it is still idle.
func (d *Datapath) stillIdle(f *natFlow, now time.Duration) bool {
	fresh := *f
	for _, k := range []*myelinNatKey{f.fwd, f.rev} {
		var v myelinNatEntry
		if k != nil && d.objs.MyelinSnat.Lookup(k, &v) == nil {
			fresh.lastSeen = max(fresh.lastSeen, v.LastSeen)
			fresh.flags |= v.Flags
		}
	}
	return natIdle(&fresh, now)
}

// natTimeout is the idle timeout of a flow of proto in state flags.
func natTimeout(proto uint8, flags uint16) time.Duration {
	switch proto {
	case unix.IPPROTO_TCP:
		switch {
		case flags&uint16(myelinNatFlagsNAT_F_CLOSING) != 0:
			return NATTimeoutTCPClosing
		case flags&uint16(myelinNatFlagsNAT_F_REPLIED) != 0:
			return NATTimeoutTCPEstablished
		}
		return NATTimeoutTCPSyn
	case unix.IPPROTO_UDP:
		return NATTimeoutUDP
	}
	return NATTimeoutICMP
}

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

// readNAT reads myelin_snat and pairs its entries into flows.
func (d *Datapath) readNAT() (map[natFlowID]*natFlow, error) {
	var (
		k myelinNatKey
		v myelinNatEntry
	)
	flows := make(map[natFlowID]*natFlow)
	it := d.objs.MyelinSnat.Iterate()
	for it.Next(&k, &v) {
		id := natFlowOf(k, v)
		f := flows[id]
		if f == nil {
			f = &natFlow{entry: NATEntry{Proto: id.proto, PodIP: id.pod, PodPort: id.podPort,
				NATPort: id.natPort, Dst: id.dst, DstPort: id.dstPort}}
			flows[id] = f
		}
		key := k
		if k.Dir == uint8(myelinNatDirNAT_DIR_EGRESS) {
			f.fwd = &key
		} else {
			f.rev = &key
		}
		f.lastSeen = max(f.lastSeen, v.LastSeen)
		f.flags |= v.Flags
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read myelin_snat: %w", err)
	}
	for _, f := range flows {
		f.entry.LastSeen = time.Duration(f.lastSeen)
		f.entry.State = natState(f.entry.Proto, f.flags)
	}
	return flows, nil
}

// natFlowOf is the flow an entry belongs to. The forward entry is keyed by
// the pod's tuple and holds the NAT port; the reverse entry is keyed by the
// reply's tuple (destination, node IP, ports swapped) and holds the pod's.
func natFlowOf(k myelinNatKey, v myelinNatEntry) natFlowID {
	id := natFlowID{proto: k.Proto}
	if k.Dir == uint8(myelinNatDirNAT_DIR_EGRESS) {
		id.pod, id.podPort = addrFromNetwork(k.Saddr), ntohs(k.Sport)
		id.dst, id.dstPort = addrFromNetwork(k.Daddr), ntohs(k.Dport)
		id.natPort = ntohs(v.Port)
		return id
	}
	id.dst, id.dstPort = addrFromNetwork(k.Saddr), ntohs(k.Sport)
	id.natPort = ntohs(k.Dport)
	id.pod, id.podPort = addrFromNetwork(v.Addr), ntohs(v.Port)
	return id
}
