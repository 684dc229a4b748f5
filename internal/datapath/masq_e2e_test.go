package datapath

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/testenv"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// An end-to-end masquerade lab: a pod netns behind a node netns whose uplink
// dpup0 (203.0.113.1/24) is a veth to an "external" netns (203.0.113.10/24)
// with no route to the pod CIDR, so only translated traffic can be answered.
// Everything lives in dptest-* namespaces.

const (
	e2eUplink = "dpup0"
	e2eNodeIP = "203.0.113.1"
	e2eExtIP  = "203.0.113.10"
	e2ePort   = 8080
)

// The pod pings the external host and opens a TCP connection to it, in both
// host routing modes; the external side sees the node IP as the source.
func TestPrivilegedMasqueradeEndToEnd(t *testing.T) {
	requirePrivileged(t)
	testenv.RequireTools(t, "nsenter", "ping")
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			pin := testPinDir(t)
			inNetns(t, func(node string) {
				if err := masqueradeEndToEnd(t, node, pin, routing); err != nil {
					t.Error(err)
				}
			})
		})
	}
}

// masqueradeEndToEnd runs the lab; the calling thread is in the node netns node.
func masqueradeEndToEnd(t *testing.T, node, pinDir string, routing HostRouting) error {
	home, err := netns.Get()
	if err != nil {
		return err
	}
	defer home.Close()
	pod := &tunnelNode{podNSName: node + "-pod", podIP: mustAddr("10.1.0.10"), hostVeth: "dpvetha"}
	extName := node + "-ext"
	ext, err := newNamedNetns(extName, home)
	if err != nil {
		return err
	}
	defer deleteNamedNetns(t, extName, ext)
	if pod.podNS, err = newNamedNetns(pod.podNSName, home); err != nil {
		return err
	}
	defer deleteNamedNetns(t, pod.podNSName, pod.podNS)

	d, err := setupMasqNode(home, ext, pod, pinDir, routing)
	if err != nil {
		return err
	}
	defer d.Close()

	out, err := exec.Command("nsenter", "--net=/run/netns/"+pod.podNSName, "ping", "-n", "-c", "3",
		"-i", "0.2", "-w", "10", e2eExtIP).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %s from the pod: %w\n%s", e2eExtIP, err, out)
	}
	seen, err := tcpAcross(ext, pod.podNS)
	if err != nil {
		return err
	}
	if seen.Addr() != mustAddr(e2eNodeIP) {
		return fmt.Errorf("external server saw the connection from %v, want the node IP %s", seen, e2eNodeIP)
	}
	return checkE2ENAT(d, pod.podIP)
}

// setupMasqNode wires the uplink, the external host and the pod, and loads
// and attaches a masquerading datapath in the node netns home.
func setupMasqNode(home, ext netns.NsHandle, pod *tunnelNode, pinDir string, routing HostRouting) (*Datapath, error) {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: e2eUplink}, PeerName: e2eUplink, PeerNamespace: netlink.NsFd(int(ext))}
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("add uplink veth: %w", err)
	}
	err := inNode(ext, func() error {
		for _, a := range []struct {
			dev  string
			addr netip.Prefix
		}{{e2eUplink, netip.MustParsePrefix(e2eExtIP + "/24")}, {"lo", netip.Prefix{}}} {
			if _, err := upWithAddr(a.dev, a.addr); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := netns.Set(home); err != nil {
		return nil, err
	}
	uplink, err := upWithAddr(e2eUplink, netip.MustParsePrefix(e2eNodeIP+"/24"))
	if err != nil {
		return nil, err
	}
	if err := setForwarding(true); err != nil {
		return nil, err
	}
	if err := addTestPod(pod); err != nil {
		return nil, err
	}
	podRoute := &netlink.Route{LinkIndex: pod.hostIdx, Dst: &net.IPNet{IP: pod.podIP.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := netlink.RouteAdd(podRoute); err != nil {
		return nil, fmt.Errorf("add pod route: %w", err)
	}
	d, err := Load(Config{PinDir: pinDir, HostRouting: routing, Masquerade: true,
		NodeIP: mustAddr(e2eNodeIP), ClusterCIDR: netip.MustParsePrefix("10.1.0.0/16")})
	if err != nil {
		return nil, fmt.Errorf("load: %+v", err)
	}
	steps := []func() error{
		func() error {
			return d.SetNoMasquerade([]netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix(e2eNodeIP + "/32")})
		},
		func() error {
			return d.UpsertEndpoint(pod.podIP, EndpointInfo{IfIndex: pod.hostIdx, PodMAC: pod.pMAC, HostMAC: pod.hostMAC, ID: 1})
		},
		func() error { return d.AttachEndpoint(pod.hostIdx, pod.hostVeth) },
		func() error { return d.AttachNetdev(uplink, e2eUplink) },
		func() error { return d.AttachToNetdev(uplink, e2eUplink) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// inNetnsThread runs fn on a fresh locked thread in ns; the thread is
// discarded afterwards (its goroutine exits still locked). Sockets made by
// fn stay in ns and are usable from any thread.
func inNetnsThread(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// tcpAcross connects from the pod netns to a server in the external netns,
// exchanges a line, and returns the client address the server saw.
func tcpAcross(ext, podNS netns.NsHandle) (netip.AddrPort, error) {
	var ln net.Listener
	err := inNetnsThread(ext, func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf("%s:%d", e2eExtIP, e2ePort))
		return err
	})
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("listen in the external netns: %w", err)
	}
	defer ln.Close()
	seen := make(chan netip.AddrPort, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(seen)
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("hello from outside\n"))
		seen <- netip.MustParseAddrPort(c.RemoteAddr().String())
	}()
	var conn net.Conn
	err = inNetnsThread(podNS, func() (err error) {
		conn, err = net.DialTimeout("tcp4", fmt.Sprintf("%s:%d", e2eExtIP, e2ePort), 5*time.Second)
		return err
	})
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("connect from the pod: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := io.ReadAll(io.LimitReader(conn, 19))
	if err != nil || !strings.HasPrefix(string(line), "hello from outside") {
		return netip.AddrPort{}, fmt.Errorf("read from the server: %q, %v", line, err)
	}
	select {
	case a, ok := <-seen:
		if !ok {
			return netip.AddrPort{}, fmt.Errorf("accept failed")
		}
		return a, nil
	case <-time.After(5 * time.Second):
		return netip.AddrPort{}, fmt.Errorf("server never accepted")
	}
}

// checkE2ENAT requires an established TCP flow and an ICMP flow of the pod
// to the external host, through the node IP.
func checkE2ENAT(d *Datapath, podIP netip.Addr) error {
	es, err := d.NATEntries()
	if err != nil {
		return err
	}
	var tcp, icmp bool
	for _, e := range es {
		if e.PodIP != podIP || e.Dst != mustAddr(e2eExtIP) {
			continue
		}
		tcp = tcp || (e.Proto == protoTCP && e.DstPort == e2ePort && e.State != "tcp-syn")
		icmp = icmp || e.Proto == protoICMP
	}
	if !tcp || !icmp {
		return fmt.Errorf("NAT flows %+v: want a replied TCP flow to %s:%d and an ICMP flow", es, e2eExtIP, e2ePort)
	}
	return nil
}
