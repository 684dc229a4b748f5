package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// Load balancing fixtures: the cluster CIDR 10.0.0.0/14 holds pod A
// (10.1.0.10) and pod B (10.1.0.20) on this node and 10.2.0.33 on another
// node; 10.96.0.10 is a ClusterIP, 192.168.0.11 (testNodeIP) the node IP
// with NodePorts, 203.0.113.10 an external client.
const (
	vip      = "10.96.0.10"
	podBIP   = "10.1.0.20"
	remoteIP = "10.2.0.33"
	hairpin  = "169.254.42.1"
	nodePort = 30080
)

var (
	lbClusterCIDR = netip.MustParsePrefix("10.0.0.0/14")
	backendB      = Backend{Addr: mustAddr(podBIP), Port: 8080}
	backendRemote = Backend{Addr: mustAddr(remoteIP), Port: 8080}
	lbBackends    = map[uint32]Backend{1: backendB, 2: backendRemote}
	feTCP         = Frontend{Addr: mustAddr(vip), Port: 80, Proto: protoTCP}
	feUDP         = Frontend{Addr: mustAddr(vip), Port: 53, Proto: protoUDP}
	feNodePort    = Frontend{Addr: testNodeIP, Port: nodePort, Proto: protoTCP}
)

// loadLB loads a datapath with load balancing on (maglev: the Maglev table size, 0 for none).
func loadLB(t testing.TB, routing HostRouting, maglev uint32) *Datapath {
	t.Helper()
	return loadTestConfig(t, Config{HostRouting: routing, LoadBalancing: true, MaglevTableSize: maglev,
		NodeIP: testNodeIP, ClusterCIDR: lbClusterCIDR, NATPortMin: testNATPort, NATPortMax: testNATPort})
}

// lbState is the service state a test starts from.
type lbState struct {
	backends map[uint32]Backend
	services map[Frontend]Service
}

// seedLB makes the datapath hold exactly st, with no flows, affinities or
// NAT entries.
func seedLB(d *Datapath, st lbState) error {
	old, err := d.Services()
	if err != nil {
		return err
	}
	for _, s := range old {
		if err := d.DeleteService(s.Frontend); err != nil {
			return err
		}
	}
	for _, m := range []*ebpf.Map{d.objs.MyelinLbBackends, d.objs.MyelinLbCt, d.objs.MyelinLbCtNodeport, d.objs.MyelinLbCtNodeportSyn, d.objs.MyelinLbAffinity,
		d.objs.MyelinSnat, d.objs.MyelinNodeportSyn, d.objs.MyelinNodeportNat, d.objs.MyelinNodeportUdp} {
		if err := clearMap(m); err != nil {
			return err
		}
	}
	for id, b := range st.backends {
		if err := d.UpsertBackend(id, b); err != nil {
			return err
		}
	}
	for fe, s := range st.services {
		if err := d.UpsertService(fe, s); err != nil {
			return err
		}
	}
	return nil
}

// clearMap deletes every entry of m.
func clearMap(m *ebpf.Map) error {
	key := make([]byte, m.KeySize())
	for {
		err := m.NextKey(nil, key)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := m.Delete(key); err != nil {
			return err
		}
	}
}

// clearCT forgets every load-balanced flow.
func clearCT(d *Datapath) error {
	return errors.Join(clearMap(d.objs.MyelinLbCt), clearMap(d.objs.MyelinLbCtNodeport), clearMap(d.objs.MyelinLbCtNodeportSyn))
}

// runPacket runs in through prog and returns verdict and output.
func runPacket(prog *ebpf.Program, in []byte, ctx *skbCtx) (uint32, []byte, error) {
	opts := &ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)+256)}
	if ctx != nil {
		opts.Context = *ctx
	}
	ret, err := prog.Run(opts)
	return ret, opts.DataOut, err
}

// dstOf returns the IPv4 destination and L4 destination port of frame.
func dstOf(frame []byte) (netip.Addr, uint16) {
	hlen := int(frame[14]&0x0f) * 4
	return netip.AddrFrom4([4]byte(frame[30:34])), binary.BigEndian.Uint16(frame[14+hlen+2:])
}

// seedAffinity writes client's affinity to backend id at index of service svcID, last used at lastUsed.
func seedAffinity(d *Datapath, svcID uint32, client string, id, index uint32, lastUsed time.Duration) error {
	k := myelinLbAffinityKey{SvcId: svcID, Client: networkUint32(mustAddr(client))}
	v := myelinLbAffinity{LastUsed: uint64(lastUsed), BackendId: id, Index: index}
	return d.objs.MyelinLbAffinity.Update(k, v, ebpf.UpdateAny)
}

// portUnreachable is the ICMP port unreachable the datapath must make of
// the frame in: from its destination to its source, MACs swapped, quoting
// its IPv4 header and 8 bytes.
func portUnreachable(in []byte) []byte {
	hlen := int(in[14]&0x0f) * 4
	quote := in[14 : 14+hlen+8]
	ip := make([]byte, 20)
	ip[0], ip[1] = 0x45, 0xc0
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(quote)))
	ip[8], ip[9] = 64, protoICMP
	copy(ip[12:16], in[30:34])
	copy(ip[16:20], in[26:30])
	binary.BigEndian.PutUint16(ip[10:], checksum(ip, 0))
	icmp := append([]byte{3, 3, 0, 0, 0, 0, 0, 0}, quote...)
	binary.BigEndian.PutUint16(icmp[2:], checksum(icmp, 0))
	out := ethernet(in[6:12], in[0:6], etherTypeIPv4)
	return append(append(out, ip...), icmp...)
}

// checkCTFlow requires the forward conntrack entry of tuple to point at backend id.
func checkCTFlow(d *Datapath, p pkt, id uint32) error {
	k := myelinCtKey{Saddr: networkUint32(p.src), Daddr: networkUint32(p.dst), Sport: htons(p.sport),
		Dport: htons(p.dport), Proto: p.proto, Dir: uint8(myelinCtDirCT_DIR_FORWARD)}
	var v myelinCtEntry
	if err := d.objs.MyelinLbCt.Lookup(k, &v); err != nil {
		return fmt.Errorf("conntrack entry of %v:%d -> %v:%d: %w", p.src, p.sport, p.dst, p.dport, err)
	}
	if v.BackendId != id {
		return fmt.Errorf("conntrack entry of %v:%d -> %v:%d: backend %d, want %d", p.src, p.sport, p.dst, p.dport, v.BackendId, id)
	}
	return nil
}

// checkCTReply requires a reverse conntrack entry for reply's tuple to exist (want) or not.
func checkCTReply(d *Datapath, reply pkt, want bool) error {
	k := myelinCtKey{Saddr: networkUint32(reply.src), Daddr: networkUint32(reply.dst), Sport: htons(reply.sport),
		Dport: htons(reply.dport), Proto: reply.proto, Dir: uint8(myelinCtDirCT_DIR_REVERSE)}
	var v myelinCtEntry
	err := d.objs.MyelinLbCt.Lookup(k, &v)
	switch {
	case want && err != nil:
		return fmt.Errorf("reverse conntrack entry of %v:%d -> %v:%d: %w", reply.src, reply.sport, reply.dst, reply.dport, err)
	case !want && err == nil:
		return fmt.Errorf("reverse conntrack entry of %v:%d -> %v:%d still there (to frontend %v)", reply.src, reply.sport, reply.dst, reply.dport, v.FrontAddr)
	case !want && !errors.Is(err, ebpf.ErrKeyNotExist):
		return err
	}
	return nil
}
