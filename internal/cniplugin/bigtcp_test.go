package cniplugin

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/link"
	"github.com/myelin-net/myelin/internal/netns"
)

// TestPrivilegedVethBIGTCP builds a pod's veth with BIG TCP off (gso 0) and on, checks
// the IPv4 GSO and GRO sizes of both ends, and moves 256 MiB each way between the
// pod and the host netns, intact (CRC-32: a hash slower than the link would shrink
// the receive window).
func TestPrivilegedVethBIGTCP(t *testing.T) {
	requireRoot(t)
	for i, gso := range []int{0, link.BIGTCPIPv4Size} {
		t.Run(fmt.Sprintf("gso=%d", gso), func(t *testing.T) {
			host, pod := throwawayNetNS(t, "host"), throwawayNetNS(t, "pod")
			hostIf := fmt.Sprintf("myltest00001%d", i)
			podIP := netip.MustParseAddr("10.244.7.11")
			want := gso
			if want == 0 {
				want = link.LegacyGSOMaxSize
			}
			err := netns.Do(host, func() error {
				if _, err := setupVeth(pod, "eth0", hostIf, 1500, 1500, gso, podIP, netip.MustParseAddr(api.PodGateway)); err != nil {
					return err
				}
				return hostRouteTo(hostIf, podIP)
			})
			if err != nil {
				t.Fatal(err)
			}
			checkGSO(t, host, hostIf, want)
			checkGSO(t, pod, "eth0", want)
			ln := listenIn(t, pod, podIP.String()+":5001")
			before := rxStats(t, pod, "eth0")
			hostBefore := rxStats(t, host, hostIf)
			transferBothWays(t, host, ln, 256<<20)
			got, hostGot := rxStats(t, pod, "eth0").since(before), rxStats(t, host, hostIf).since(hostBefore)
			// Logged, not asserted: how large TCP builds its packets depends on the
			// pacing rate and the windows, so an average proves nothing either way
			// (the bench measures what the size buys: docs/bench/2026-11-23/bigtcp).
			for _, s := range []struct {
				dir string
				st  linkRx
			}{{"host to pod", got}, {"pod to host", hostGot}} {
				t.Logf("%s: %d bytes in %d packets, %d per packet", s.dir, s.st.bytes, s.st.packets, s.st.bytes/max(s.st.packets, 1))
			}
		})
	}
}

// hostRouteTo gives the host netns an address on hostIf (the pod's default route
// sends everything there) and a route to the pod.
func hostRouteTo(hostIf string, pod netip.Addr) error {
	l, err := netlink.LinkByName(hostIf)
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 99, 7, 1), Mask: net.CIDRMask(32, 32)}}); err != nil {
		return fmt.Errorf("add host address: %w", err)
	}
	return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: pod.AsSlice(), Mask: net.CIDRMask(32, 32)}})
}

func checkGSO(t *testing.T, ns, dev string, want int) {
	t.Helper()
	err := netns.Do(ns, func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		if a := l.Attrs(); int(a.GSOIPv4MaxSize) != want || int(a.GROIPv4MaxSize) != want {
			t.Errorf("%s: gso_ipv4_max_size %d gro_ipv4_max_size %d, want %d", dev, a.GSOIPv4MaxSize, a.GROIPv4MaxSize, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// listenIn opens a TCP listener in netns ns; its socket stays there.
func listenIn(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	err := netns.Do(ns, func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// transferBothWays connects from netns from to ln, sends n bytes, then reads n bytes
// back (the server echoes the digest and then sends its own n bytes), and checks both.
func transferBothWays(t *testing.T, from string, ln net.Listener, n int64) {
	t.Helper()
	payload := bytes.Repeat([]byte("myelin big tcp "), 1<<16) // ~1 MiB a write
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		h := crc32.NewIEEE()
		if _, err := io.CopyN(h, c, n); err != nil {
			srvErr <- fmt.Errorf("server read: %w", err)
			return
		}
		if _, err := c.Write(h.Sum(nil)); err != nil {
			srvErr <- err
			return
		}
		_, err = io.CopyN(c, repeat(payload), n)
		srvErr <- err
	}()
	var c net.Conn
	err := netns.Do(from, func() (err error) {
		c, err = net.Dial("tcp4", ln.Addr().String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := crc32.NewIEEE()
	if _, err := io.CopyN(io.MultiWriter(c, want), repeat(payload), n); err != nil {
		t.Fatalf("client write: %v", err)
	}
	sum := make([]byte, crc32.Size)
	if _, err := io.ReadFull(c, sum); err != nil {
		t.Fatalf("read the server's digest: %v", err)
	}
	if !bytes.Equal(sum, want.Sum(nil)) {
		t.Errorf("the server received other bytes than the client sent")
	}
	back := crc32.NewIEEE()
	if _, err := io.CopyN(back, c, n); err != nil {
		t.Fatalf("client read: %v", err)
	}
	ref := crc32.NewIEEE()
	_, _ = io.CopyN(ref, repeat(payload), n)
	if !bytes.Equal(back.Sum(nil), ref.Sum(nil)) {
		t.Errorf("the client received other bytes than the server sent")
	}
	if err := <-srvErr; err != nil {
		t.Fatal(err)
	}
}

// repeat reads p over and over.
func repeat(p []byte) io.Reader { return &repeater{p: p} }

type repeater struct {
	p   []byte
	off int
}

func (r *repeater) Read(b []byte) (int, error) {
	n := copy(b, r.p[r.off:])
	r.off = (r.off + n) % len(r.p)
	return n, nil
}

// linkRx is a device's receive counters.
type linkRx struct{ bytes, packets uint64 }

func (a linkRx) since(b linkRx) linkRx { return linkRx{a.bytes - b.bytes, a.packets - b.packets} }

func rxStats(t *testing.T, ns, dev string) linkRx {
	t.Helper()
	var out linkRx
	err := netns.Do(ns, func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		out = linkRx{l.Attrs().Statistics.RxBytes, l.Attrs().Statistics.RxPackets}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
