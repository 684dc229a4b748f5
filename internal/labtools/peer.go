package labtools

import (
	"context"
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
		peer, err := peerName(c.(syscall.Conn))
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

// peerName is getpeername(2) of c, not what it was dialled to.
func peerName(c syscall.Conn) (string, error) {
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
