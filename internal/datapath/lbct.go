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

// ctFlow is both entries of one flow, as read from a conntrack map.
type ctFlow struct {
	fwd, rev *myelinCtKey // nil when missing
	lastSeen uint64
	flags    uint16
}

// GCServiceCT deletes the conntrack entries (both directions) of every
// load-balanced flow, in myelin_lb_ct and myelin_lb_ct_nodeport, idle longer
// than its state's timeout at now, a time on the MonotonicNow clock, and
// returns how many map entries it removed. The agent runs it periodically
// next to GCNAT; it is what frees room in a full table. A flow is re-read
// just before deletion, so one that saw a packet during the walk is kept.
func (d *Datapath) GCServiceCT(now time.Duration) (int, error) {
	var errs []error
	removed := 0
	for _, m := range []*ebpf.Map{d.objs.MyelinLbCt, d.objs.MyelinLbCtNodeport} {
		n, err := gcCTMap(m, now)
		removed += n
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// gcCTMap is GCServiceCT for one map.
func gcCTMap(m *ebpf.Map, now time.Duration) (int, error) {
	flows, err := readCT(m)
	if err != nil {
		return 0, err
	}
	removed := 0
	for id, f := range flows {
		if !ctIdle(id.proto, f, now) || !ctStillIdle(m, id.proto, f, now) {
			continue
		}
		// Forward first: a packet meanwhile chooses afresh and writes both again.
		for _, k := range []*myelinCtKey{f.fwd, f.rev} {
			if k == nil {
				continue
			}
			err := m.Delete(k)
			if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return removed, fmt.Errorf("delete conntrack entry of %v: %w", id, err)
			}
			if err == nil {
				removed++
			}
		}
	}
	return removed, nil
}

// readCT reads a conntrack map and pairs its entries into flows.
func readCT(m *ebpf.Map) (map[ctFlowID]*ctFlow, error) {
	var (
		k myelinCtKey
		v myelinCtEntry
	)
	flows := make(map[ctFlowID]*ctFlow)
	it := m.Iterate()
	for it.Next(&k, &v) {
		id := ctFlowOf(k, v)
		f := flows[id]
		if f == nil {
			f = &ctFlow{}
			flows[id] = f
		}
		key := k
		if k.Dir == uint8(myelinCtDirCT_DIR_FORWARD) {
			f.fwd = &key
		} else {
			f.rev = &key
		}
		f.lastSeen = max(f.lastSeen, v.LastSeen)
		f.flags |= v.Flags
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", m, err)
	}
	return flows, nil
}

// ctFlowOf is the flow an entry belongs to. The forward entry is keyed by
// the client's tuple; the reverse entry is keyed by the reply's tuple and
// holds the client and the frontend (the client's port is its dport).
func ctFlowOf(k myelinCtKey, v myelinCtEntry) ctFlowID {
	if k.Dir == uint8(myelinCtDirCT_DIR_FORWARD) {
		return ctFlowID{proto: k.Proto, client: addrFromNetwork(k.Saddr), clientPort: ntohs(k.Sport),
			front: addrFromNetwork(k.Daddr), frontPort: ntohs(k.Dport)}
	}
	return ctFlowID{proto: k.Proto, client: addrFromNetwork(v.ClientAddr), clientPort: ntohs(k.Dport),
		front: addrFromNetwork(v.FrontAddr), frontPort: ntohs(v.FrontPort)}
}

// ctIdle reports whether f has been idle past its state's timeout at now.
func ctIdle(proto uint8, f *ctFlow, now time.Duration) bool {
	last := time.Duration(f.lastSeen)
	return now > last && now-last > ctTimeout(proto, f.flags)
}

// ctStillIdle re-reads f's entries and reports whether it is still idle.
func ctStillIdle(m *ebpf.Map, proto uint8, f *ctFlow, now time.Duration) bool {
	fresh := *f
	for _, k := range []*myelinCtKey{f.fwd, f.rev} {
		var v myelinCtEntry
		if k != nil && m.Lookup(k, &v) == nil {
			fresh.lastSeen = max(fresh.lastSeen, v.LastSeen)
			fresh.flags |= v.Flags
		}
	}
	return ctIdle(proto, &fresh, now)
}

// ctTimeout is the idle timeout of a flow of proto whose entries carry flags.
func ctTimeout(proto uint8, flags uint16) time.Duration {
	if proto != unix.IPPROTO_TCP {
		return ServiceCTTimeoutUDP
	}
	switch {
	case flags&uint16(myelinCtFlagsCT_F_CLOSING) != 0:
		return ServiceCTTimeoutTCPClosing
	case flags&uint16(myelinCtFlagsCT_F_ESTABLISHED) != 0:
		return ServiceCTTimeoutTCPEstablished
	}
	return ServiceCTTimeoutTCPSyn
}

// ConntrackIDs returns the service ids and backend ids that forward Service
// conntrack entries name, each once: ids the service manager must not reuse
// while those entries live.
func (d *Datapath) ConntrackIDs() (services, backends []uint32, err error) {
	svcs, bes := map[uint32]bool{}, map[uint32]bool{}
	for _, m := range []*ebpf.Map{d.objs.MyelinLbCt, d.objs.MyelinLbCtNodeport} {
		var (
			k myelinCtKey
			v myelinCtEntry
		)
		it := m.Iterate()
		for it.Next(&k, &v) {
			if k.Dir == uint8(myelinCtDirCT_DIR_FORWARD) {
				svcs[v.SvcId], bes[v.BackendId] = true, true
			}
		}
		if err := it.Err(); err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", m, err)
		}
	}
	delete(svcs, 0)
	delete(bes, 0)
	return slices.Collect(maps.Keys(svcs)), slices.Collect(maps.Keys(bes)), nil
}
