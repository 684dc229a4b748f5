package datapath

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/myelin-net/myelin/internal/labtools"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Socket-LB fixtures: in a test netns, backends 10.1.0.20 and 10.1.0.21 listen on
// lo (TCP and UDP, port 8080), each answering with its own address; 10.96.0.10:80
// is their Service. The netns has no route to 10.96.0.0/16: a socket that is not
// translated can't reach the Service at all.
const (
	sockSvcAddr = "10.96.0.10:80"
	sockHelper  = "MYELIN_SOCKLB_HELPER"
)

var sockBackends = map[uint32]Backend{1: {Addr: mustAddr("10.1.0.20"), Port: 8080}, 2: {Addr: mustAddr("10.1.0.21"), Port: 8080}}

// TestSocketLBHelperProcess is the client the tests run in their cgroup: it is
// not a test, it runs only as the helper (MYELIN_SOCKLB_HELPER=tcp|udp-connected|
// udp-reconnect|udp-disconnect|udp, or connect-loop for BenchmarkSocketLBConnect).
// It prints "peer=<what getpeername or recvfrom shows> backend=<the answer>".
func TestSocketLBHelperProcess(t *testing.T) {
	mode := os.Getenv(sockHelper)
	if mode == "" {
		t.Skip("helper process of the socket-LB tests")
	}
	if mode == "connect-loop" { // BenchmarkSocketLBConnect
		out, err := connectLoop(os.Getenv("MYELIN_SOCKLB_ADDR"))
		if err != nil {
			fmt.Printf("error=%v\n", err)
			os.Exit(1)
		}
		fmt.Println(out)
		os.Exit(0)
	}
	peer, answer, err := sockClient(mode, os.Getenv("MYELIN_SOCKLB_ADDR"))
	if err != nil {
		fmt.Printf("error=%v\n", err)
		os.Exit(1)
	}
	fmt.Printf("peer=%s backend=%s\n", peer, answer)
	os.Exit(0)
}

// sockClient talks to addr once in mode and returns the peer the socket shows and
// the backend's answer.
func sockClient(mode, addr string) (string, string, error) {
	switch mode {
	case "tcp":
		c, err := net.DialTimeout("tcp4", addr, 5*time.Second)
		if err != nil {
			return "", "", err
		}
		defer c.Close()
		answer, err := exchange(c, c.Read)
		if err != nil {
			return "", "", err
		}
		// RemoteAddr is what connect() was given; ask the kernel.
		peer, err := labtools.PeerName(c.(syscall.Conn))
		return peer, answer, err
	case "udp-connected", "udp-reconnect", "udp-disconnect":
		c, err := net.Dial("udp4", addr)
		if err != nil {
			return "", "", err
		}
		defer c.Close()
		return sockUDPConnected(c.(*net.UDPConn), strings.TrimPrefix(mode, "udp-"))
	case "udp":
		c, err := net.ListenUDP("udp4", nil)
		if err != nil {
			return "", "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.WriteTo([]byte("hi\n"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr))); err != nil {
			return "", "", err
		}
		buf := make([]byte, 64)
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return "", "", err
		}
		return from.String(), strings.TrimSpace(string(buf[:n])), nil
	}
	return "", "", fmt.Errorf("unknown mode %q", mode)
}

// exchange writes one line to c and returns the answer read with read.
func exchange(c net.Conn, read func([]byte) (int, error)) (string, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("hi\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 64)
	n, err := read(buf)
	return strings.TrimSpace(string(buf[:n])), err
}

// sockUDPConnected exchanges a datagram on the connected socket c, reading it with
// recvfrom, whose source must be what getpeername shows. Then, by then:
// "reconnect" connects c again, straight to the backend that answered, and returns
// what getpeername shows after that; "disconnect" dissolves the association
// (connect with AF_UNSPEC), sends a datagram to that backend's address with sendto
// and returns the source recvfrom shows of its answer.
func sockUDPConnected(c *net.UDPConn, then string) (string, string, error) {
	var from net.Addr
	read := func(b []byte) (n int, err error) { n, from, err = c.ReadFrom(b); return n, err }
	answer, err := exchange(c, read)
	if err != nil {
		return "", "", err
	}
	peer, err := labtools.PeerName(c)
	if err != nil || from.String() != peer {
		return "", "", fmt.Errorf("recvfrom shows %s, getpeername %s (%v)", from, peer, err)
	}
	if then == "connected" {
		return peer, answer, nil
	}
	backend, err := netip.ParseAddr(answer)
	if err != nil {
		return "", "", fmt.Errorf("answer %q: %w", answer, err)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return "", "", err
	}
	var cerr error
	to := &unix.SockaddrInet4{Addr: backend.As4(), Port: 8080}
	if then == "reconnect" {
		if err := rc.Control(func(fd uintptr) { cerr = unix.Connect(int(fd), to) }); err != nil || cerr != nil {
			return "", "", fmt.Errorf("connect again to %s: %v %v", backend, err, cerr)
		}
		peer, err = labtools.PeerName(c)
		return peer, answer, err
	}
	unspec := unix.RawSockaddr{Family: unix.AF_UNSPEC}
	if err := rc.Control(func(fd uintptr) {
		if _, _, errno := unix.Syscall(unix.SYS_CONNECT, fd, uintptr(unsafe.Pointer(&unspec)), unsafe.Sizeof(unspec)); errno != 0 {
			cerr = errno
		}
	}); err != nil || cerr != nil {
		return "", "", fmt.Errorf("disconnect (connect AF_UNSPEC): %v %v", err, cerr)
	}
	if err := rc.Control(func(fd uintptr) { cerr = unix.Sendto(int(fd), []byte("hi\n"), 0, to) }); err != nil || cerr != nil {
		return "", "", fmt.Errorf("sendto %s after the disconnect: %v %v", backend, err, cerr)
	}
	buf := make([]byte, 64)
	n, err := read(buf)
	if err != nil {
		return "", "", err
	}
	return from.String(), strings.TrimSpace(string(buf[:n])), nil
}

// testCgroup makes a cgroup v2 directory for the test's clients, removed at cleanup.
func testCgroup(t testing.TB) string {
	t.Helper()
	root, err := Cgroup2Mount()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "dptest-"+randomSuffix()) // not myelin-*: the lab owns that prefix
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Rmdir(dir); err != nil {
			t.Errorf("remove cgroup %s: %v", dir, err)
		}
	})
	return dir
}

// sockServe starts the backends in netns ns: on each address, a TCP and a UDP
// server on port 8080 that answer with their own address.
func sockServe(t testing.TB, ns netns.NsHandle) {
	t.Helper()
	err := inNetnsThread(ns, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		for _, b := range sockBackends {
			if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: b.Addr.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
				return err
			}
			ap := netip.AddrPortFrom(b.Addr, b.Port).String()
			ln, err := net.Listen("tcp4", ap)
			if err != nil {
				return err
			}
			t.Cleanup(func() { ln.Close() })
			go serveTCP(ln, b.Addr.String())
			pc, err := net.ListenPacket("udp4", ap)
			if err != nil {
				return err
			}
			t.Cleanup(func() { pc.Close() })
			go serveUDP(pc, b.Addr.String())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("start backends: %v", err)
	}
}

func serveTCP(ln net.Listener, name string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = bufio.NewReader(c).ReadString('\n')
			_, _ = c.Write([]byte(name + "\n"))
		}()
	}
}

func serveUDP(pc net.PacketConn, name string) {
	buf := make([]byte, 64)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo([]byte(name+"\n"), from)
	}
}

// runSockClient runs the helper in netns nsName and, unless cgroup is "", in
// cgroup; it returns what the helper printed.
func runSockClient(t testing.TB, nsName, cgroup, mode, addr string) (string, error) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", nsName, os.Args[0], "-test.run=^TestSocketLBHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), sockHelper+"="+mode, "MYELIN_SOCKLB_ADDR="+addr)
	if cgroup != "" {
		fd, err := unix.Open(cgroup, unix.O_DIRECTORY|unix.O_RDONLY, 0)
		if err != nil {
			t.Fatalf("open cgroup: %v", err)
		}
		defer unix.Close(fd)
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	}
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "peer=") || strings.HasPrefix(line, "error=") || strings.HasPrefix(line, "ns=") {
			return line, err
		}
	}
	return string(out), err
}

// sockLBSetup loads a load-balancing datapath, attaches socket-LB to a fresh
// cgroup and starts the backends in a fresh netns; fn gets the netns's name.
func sockLBSetup(t *testing.T, svc Service, fn func(d *Datapath, nsName, cgroup string)) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingLegacy, 0)
	cg := attachSockLB(t, d, svc)
	inBackendsNetns(t, func(nsName string, _ netns.NsHandle) { fn(d, nsName, cg) })
}

// inBackendsNetns runs fn in a fresh netns (its name and handle) where the backends
// of sockServe listen.
func inBackendsNetns(t testing.TB, fn func(nsName string, ns netns.NsHandle)) {
	inNetns(t, func(nsName string) {
		ns, err := netns.GetFromName(nsName)
		if err != nil {
			t.Error(err)
			return
		}
		defer ns.Close()
		sockServe(t, ns)
		fn(nsName, ns)
	})
}

// attachSockLB serves svc (sockLBState) from d and attaches socket-LB to a fresh
// cgroup, detached at cleanup; it returns the cgroup.
func attachSockLB(t testing.TB, d *Datapath, svc Service) string {
	t.Helper()
	if err := seedLB(d, sockLBState(svc)); err != nil {
		t.Fatal(err)
	}
	cg := testCgroup(t)
	if err := d.AttachSocketLB(cg); err != nil {
		t.Fatalf("attach socket-LB: %v", err)
	}
	t.Cleanup(func() {
		if err := d.DetachSocketLB(); err != nil {
			t.Error(err)
		}
	})
	return cg
}

// TestPrivilegedSocketLBTranslates: TCP, connected and unconnected UDP to the
// Service reach a backend from the cgroup, and the client sees the Service as its
// peer (getpeername, recvfrom); outside the cgroup nothing is translated.
func TestPrivilegedSocketLBTranslates(t *testing.T) {
	sockLBSetup(t, Service{ID: 1, Backends: []uint32{1, 2}}, func(d *Datapath, nsName, cg string) {
		if !d.SocketLBAttached() {
			t.Error("SocketLBAttached is false after AttachSocketLB")
		}
		for _, mode := range []string{"tcp", "udp-connected", "udp"} {
			out, err := runSockClient(t, nsName, cg, mode, sockSvcAddr)
			if err != nil {
				t.Errorf("%s client in the cgroup: %v: %s", mode, err, out)
				continue
			}
			if !strings.HasPrefix(out, "peer="+sockSvcAddr+" backend=10.1.0.2") {
				t.Errorf("%s client in the cgroup: got %q, want peer=%s and a backend's answer", mode, out, sockSvcAddr)
			}
		}
		// A socket connected again, to no Service, forgets the frontend; so does
		// one no longer connected, for datagrams straight from the backend.
		for mode, what := range map[string]string{
			"udp-reconnect":  "connected through the Service, then straight to its backend",
			"udp-disconnect": "connected through the Service, disconnected, then sending to its backend with sendto",
		} {
			out, err := runSockClient(t, nsName, cg, mode, sockSvcAddr)
			if peer, backend, _ := strings.Cut(strings.TrimPrefix(out, "peer="), " backend="); err != nil || peer != backend+":8080" {
				t.Errorf("UDP socket %s: got %q (%v), want peer=<the backend>:8080", what, out, err)
			}
		}
		if out, err := runSockClient(t, nsName, "", "tcp", sockSvcAddr); err == nil {
			t.Errorf("tcp client outside the cgroup reached the Service: %s", out)
		}
	})
}

// TestPrivilegedSocketLBAffinity: with ClientIP affinity every connection of a
// client (its netns) goes to one backend; without, both backends serve.
func TestPrivilegedSocketLBAffinity(t *testing.T) {
	for _, affinity := range []bool{true, false} {
		t.Run(fmt.Sprintf("affinity=%v", affinity), func(t *testing.T) {
			svc := Service{ID: 1, Backends: []uint32{1, 2}}
			if affinity {
				svc.Flags, svc.AffinityTimeout = ServiceAffinity, time.Hour
			}
			sockLBSetup(t, svc, func(_ *Datapath, nsName, cg string) {
				seen := map[string]int{}
				for range 16 {
					out, err := runSockClient(t, nsName, cg, "tcp", sockSvcAddr)
					if err != nil {
						t.Errorf("client: %v: %s", err, out)
						return
					}
					seen[out]++
				}
				if affinity && len(seen) != 1 {
					t.Errorf("with affinity, connections went to %v, want one backend", seen)
				}
				if !affinity && len(seen) != 2 {
					t.Errorf("without affinity, 16 connections went to %v, want both backends", seen)
				}
			})
		})
	}
}

// TestPrivilegedSocketLBNoBackendNode: a ClusterIP without a ready backend is
// refused (EPERM) to the sockets of the network namespace socket-LB was attached
// from (the node's), TCP and UDP, where nothing else would keep their packets to
// the Service address from leaving the node; other namespaces' sockets (pods')
// go on untranslated to the tc path (here: no route). An external IP is translated
// for pods only: the node's sockets reach the real address even when it has a
// backend (a Service author naming the apiserver's or a registry's address in
// spec.externalIPs gets no node traffic). With a backend the node's sockets to a
// ClusterIP are translated as ever.
func TestPrivilegedSocketLBNoBackendNode(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingLegacy, 0)
	cg := attachSockLB(t, d, Service{ID: 1}) // from the machine's netns: the test netns is a pod's
	const externalIP = "10.97.0.10:80"
	if err := d.UpsertService(Frontend{Addr: mustAddr("10.97.0.10"), Port: 80, Proto: protoTCP},
		Service{ID: 9, Flags: ServiceExternalIP, Backends: []uint32{1}}); err != nil {
		t.Fatal(err)
	}
	inBackendsNetns(t, func(nsName string, ns netns.NsHandle) {
		for _, mode := range []string{"tcp", "udp"} {
			if out, _ := runSockClient(t, nsName, cg, mode, sockSvcAddr); !strings.Contains(out, "network is unreachable") {
				t.Errorf("%s from a pod's netns to a Service without backends: got %q, want it untranslated (network is unreachable)", mode, out)
			}
		}
		if out, err := runSockClient(t, nsName, cg, "tcp", externalIP); err != nil || out != "peer="+externalIP+" backend=10.1.0.20" {
			t.Errorf("tcp from a pod's netns to an external IP with a backend: got %q (%v), want it translated", out, err)
		}
		// Attached again from a thread in the test netns: now it is the node's.
		if err := inNetnsThread(ns, func() error { return d.AttachSocketLB(cg) }); err != nil {
			t.Fatalf("attach socket-LB from the test netns: %v", err)
		}
		for _, mode := range []string{"tcp", "udp"} {
			if out, _ := runSockClient(t, nsName, cg, mode, sockSvcAddr); !strings.Contains(out, "operation not permitted") {
				t.Errorf("%s from the node's netns to a Service without backends: got %q, want it refused (operation not permitted)", mode, out)
			}
		}
		if out, _ := runSockClient(t, nsName, cg, "tcp", externalIP); !strings.Contains(out, "network is unreachable") {
			t.Errorf("tcp from the node's netns to an external IP with a backend: got %q, want it untranslated (network is unreachable)", out)
		}
		if err := seedLB(d, sockLBState(Service{ID: 1, Backends: []uint32{1}})); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []string{"tcp", "udp"} {
			if out, err := runSockClient(t, nsName, cg, mode, sockSvcAddr); err != nil || out != "peer="+sockSvcAddr+" backend=10.1.0.20" {
				t.Errorf("%s from the node's netns to a Service with a backend: got %q (%v), want it translated", mode, out, err)
			}
		}
	})
}

// TestPrivilegedSocketLBBadCgroup: a directory that is not cgroup v2 is refused
// with its name, and nothing stays attached.
func TestPrivilegedSocketLBBadCgroup(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingLegacy, 0)
	dir := t.TempDir()
	err := d.AttachSocketLB(dir)
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "cgroup-root") {
		t.Fatalf("attach to %s: got %v, want an error naming it and cgroup-root", dir, err)
	}
	if d.SocketLBAttached() {
		t.Error("socket-LB attached after a failed attach")
	}
}
