package e2e

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/netns"
)

// hostTupleRiding: node sends x/a (target, on node) a UDP datagram from shared,
// an address both nodes hold on lo (an anycast VIP): the host's own traffic,
// exempt, tracked as the host's. The other node then sends on the same tuple.
// x/a must not answer it: its answer would come back to node (the address is
// local there), to the socket still open on the tuple. Before POLICY_CT_HOST_PEER
// the tracked tuple let it in. Where the kernel delivers (legacy host routing)
// it drops the packet first as a martian (a local source from the uplink), and
// in tunnel mode the peer rule does (the inner source is not the outer one): so
// only with BPF host routing in native mode (policyJudges) is the policy the
// one to refuse it, and there the test waits for its DROP_POLICY_DENIED.
func hostTupleRiding(t *testing.T, node, other string, shared netip.Addr, target string, policyJudges bool) {
	t.Helper()
	raddr, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	laddr := &net.UDPAddr{IP: shared.AsSlice(), Port: 7001}
	var conn *net.UDPConn
	if err := netns.Do(labplan.NetNSPath(node), func() error {
		conn, err = net.DialUDP("udp", laddr, raddr)
		return err
	}); err != nil {
		t.Fatalf("node %s: UDP from %v to %v: %v", node, laddr, raddr, err)
	}
	defer conn.Close()
	buf := make([]byte, 512)
	exchange := func() (err error) {
		for range 3 { // a datagram may be lost
			if _, err = conn.Write([]byte("netpol probe")); err != nil {
				return err
			}
			_ = conn.SetReadDeadline(time.Now().Add(netpolProbeTimeout))
			if _, err = conn.Read(buf); err == nil {
				return nil
			}
		}
		return err
	}
	if err := exchange(); err != nil {
		t.Fatalf("node %s -> x/a UDP from %v (the node's own address): %v, want an answer", node, laddr, err)
	}
	ride := func() {
		if err := netns.Do(labplan.NetNSPath(other), func() error {
			c, err := net.DialUDP("udp", laddr, raddr)
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("riding"))
			return err
		}); err != nil {
			t.Fatalf("node %s: UDP from %v to %v: %v", other, laddr, raddr, err)
		}
	}
	if policyJudges {
		ev := awaitDropMatching(t, node, "DROP_POLICY_DENIED", func(ev api.Event) bool { return ev.Src == shared.String() }, ride)
		t.Logf("node %s riding node %s's host tuple: %+v", other, node, ev)
	} else {
		ride()
	}
	_ = conn.SetReadDeadline(time.Now().Add(netpolProbeTimeout))
	if n, err := conn.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("x/a answered node %s's datagram on the tuple node %s's host tracked (%d bytes, %v): "+
			"the same address from another machine rode the host's exemption", other, node, n, err)
	}
	// The host's own next datagram still passes.
	if err := exchange(); err != nil {
		t.Errorf("node %s -> x/a UDP from %v again: %v, want an answer", node, laddr, err)
	}
}
