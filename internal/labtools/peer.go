package labtools

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// PeerResult is what Peer saw: the peer address the socket shows (getpeername for
// TCP and connected UDP, recvfrom's source for unconnected UDP) and the answer of
// the lab serve endpoint that replied ("server=NAME client=IP...").
type PeerResult struct {
	Peer   string `json:"peer"`
	Answer string `json:"answer"`
	// Closed is set by PeerUntilClosed: how the connected UDP socket ended.
	Closed string `json:"closed,omitempty"`
}

// PeerUntilClosed is Peer over connected UDP that then keeps the socket, sending a
// datagram every 200 ms, until the kernel closes it under the client (a send or
// receive fails with ECONNABORTED: bpf_sock_destroy, socket-LB's answer to a backend
// that went away) or wait has passed, which is an error. answered is called once
// the first answer came back, before the wait.
func PeerUntilClosed(ctx context.Context, to string, wait time.Duration, answered func(PeerResult)) (PeerResult, error) {
	c, err := net.Dial("udp4", to)
	if err != nil {
		return PeerResult{}, fmt.Errorf("dial udp %s: %w", to, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	answer, err := exchange(c, "ping\n")
	if err != nil {
		return PeerResult{}, fmt.Errorf("talk to %s: %w", to, err)
	}
	peer, _ := PeerName(c.(syscall.Conn))
	r := PeerResult{Peer: peer, Answer: answer}
	answered(r)
	end := time.Now().Add(wait)
	buf := make([]byte, 512)
	for time.Now().Before(end) && ctx.Err() == nil {
		_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
		_, werr := c.Write([]byte("ping\n"))
		_, rerr := c.Read(buf)
		for _, e := range []error{werr, rerr} {
			if errors.Is(e, unix.ECONNABORTED) {
				r.Closed = "connection aborted"
				return r, nil
			}
		}
	}
	return r, fmt.Errorf("the UDP socket to %s (peer %s) was not closed within %s", to, peer, wait)
}

// Peer talks once to a lab serve endpoint to (IP:PORT) over proto (tcp,
// udp-connected or udp) and reports the peer its socket shows, so a test can tell
// whether a Service's address was translated back for the application.
func Peer(ctx context.Context, to, proto string, timeout time.Duration) (PeerResult, error) {
	ap, err := netip.ParseAddrPort(to)
	if err != nil {
		return PeerResult{}, fmt.Errorf("--to %q: want IP:PORT: %w", to, err)
	}
	deadline := time.Now().Add(timeout)
	switch proto {
	case "tcp", "udp-connected":
		network := map[string]string{"tcp": "tcp4", "udp-connected": "udp4"}[proto]
		d := net.Dialer{Deadline: deadline}
		c, err := d.DialContext(ctx, network, ap.String())
		if err != nil {
			return PeerResult{}, fmt.Errorf("dial %s %s: %w", proto, to, err)
		}
		defer c.Close()
		_ = c.SetDeadline(deadline)
		req := "ping\n"
		if proto == "tcp" {
			req = "GET / HTTP/1.0\r\n\r\n"
		}
		answer, err := exchange(c, req)
		if err != nil {
			return PeerResult{}, fmt.Errorf("talk to %s over %s: %w", to, proto, err)
		}
		peer, err := PeerName(c.(syscall.Conn))
		return PeerResult{Peer: peer, Answer: answer}, err
	case "udp":
		c, err := net.ListenUDP("udp4", nil)
		if err != nil {
			return PeerResult{}, err
		}
		defer c.Close()
		_ = c.SetDeadline(deadline)
		if _, err := c.WriteToUDPAddrPort([]byte("ping\n"), ap); err != nil {
			return PeerResult{}, fmt.Errorf("send to %s: %w", to, err)
		}
		buf := make([]byte, 512)
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return PeerResult{}, fmt.Errorf("receive from %s: %w", to, err)
		}
		return PeerResult{Peer: netip.AddrPortFrom(from.Addr().Unmap(), from.Port()).String(), Answer: strings.TrimSpace(string(buf[:n]))}, nil
	}
	return PeerResult{}, fmt.Errorf("--proto %q: use tcp, udp-connected or udp", proto)
}

// exchange writes req and returns the line of the answer that names the server.
func exchange(c net.Conn, req string) (string, error) {
	if _, err := c.Write([]byte(req)); err != nil {
		return "", err
	}
	buf := make([]byte, 4096)
	var got strings.Builder
	for !strings.Contains(got.String(), "server=") || !strings.HasSuffix(got.String(), "\n") {
		n, err := c.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for _, line := range strings.Split(got.String(), "\n") {
		if strings.HasPrefix(line, "server=") {
			return strings.TrimSpace(line), nil
		}
	}
	return "", fmt.Errorf("no server= line in %q", got.String())
}

// PeerName is getpeername(2) of c, not what it was dialled to.
func PeerName(c syscall.Conn) (string, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return "", err
	}
	var sa unix.Sockaddr
	var gerr error
	if err := rc.Control(func(fd uintptr) { sa, gerr = unix.Getpeername(int(fd)) }); err != nil {
		return "", err
	}
	if gerr != nil {
		return "", fmt.Errorf("getpeername: %w", gerr)
	}
	in4, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		return "", fmt.Errorf("peer %T is not IPv4", sa)
	}
	return netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port)).String(), nil
}
