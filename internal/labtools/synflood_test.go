package labtools

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
)

func TestSYNPacketChecksum(t *testing.T) {
	p := synPacket(netip.MustParseAddr("203.0.113.77"), netip.MustParseAddrPort("198.18.0.11:30080"), 40000, 12345)
	// The TCP checksum over the pseudo header and the header sums to 0xffff.
	sum := uint32(0)
	for i := 12; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(p[i:]))
	}
	sum += 6 + 20
	for i := 20; i < 40; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(p[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	if sum != 0xffff || p[33] != 0x02 || binary.BigEndian.Uint16(p[22:]) != 30080 {
		t.Errorf("SYN %x: checksum sum %#x, flags %#x", p, sum, p[33])
	}
}

func TestSYNFloodRefusesNonLab(t *testing.T) {
	// labplan.Plan.FloodTargets of a 2-node lab.
	targets := []netip.Prefix{netip.MustParsePrefix("198.18.0.11/32"), netip.MustParsePrefix("198.18.0.12/32"), netip.MustParsePrefix("10.244.0.0/16")}
	for _, c := range []struct {
		to, from string
		count    int
		want     string
	}{
		{"192.0.2.1:80", "203.0.113.0/24", 10, "only the lab's node and pod"},
		{"198.18.0.2:80", "203.0.113.0/24", 10, "only the lab's node and pod"}, // the machine's own lab address
		{"198.18.0.1:6443", "203.0.113.0/24", 10, "only the lab's node and pod"},
		{"198.18.0.11:80", "203.0.113.0/24", 0, "must be between"}, // a node: refused only for its count
		{"10.244.1.9:80", "203.0.113.0/24", 0, "must be between"},  // a pod
		{"198.18.0.11:80", "10.0.0.0/24", 10, "inside the lab's external range"},
		{"198.18.0.11:80", "203.0.113.0/24", SYNFloodMax + 1, "must be between"},
	} {
		_, err := SYNFlood(netip.MustParseAddrPort(c.to), netip.MustParsePrefix(c.from), c.count, 0, targets)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SYNFlood(%s, %s, %d) = %v, want %q", c.to, c.from, c.count, err, c.want)
		}
	}
}
