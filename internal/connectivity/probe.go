package connectivity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"

	"github.com/myelin-net/myelin/internal/labtools"
)

// ProbeKinds are what `myelin connectivity probe` can do, one exchange each.
var ProbeKinds = []string{"http", "dns", "ping", "udp-frag"}

// ProbeOptions are the flags of `myelin connectivity probe`.
type ProbeOptions struct {
	Kind string
	// To is the target: a URL (http), an IP (ping), IP:PORT (udp-frag) or the DNS
	// server's IP:PORT (dns).
	To string
	// Name is the name to resolve (dns). Expect, if set, must be among its addresses
	// (dns) or in the answer's body (http).
	Name, Expect string
	// Size is the ICMP payload (ping; 0 = the path MTU minus the IP and ICMP headers)
	// or the UDP datagram size (udp-frag).
	Size int
	// DF sets Don't Fragment on the ping (no fragmentation anywhere on the path).
	DF      bool
	Timeout time.Duration
}

// Probe runs one exchange from where it runs (inside a pod) and writes one line
// about what it saw; an error means the exchange failed.
func Probe(ctx context.Context, out io.Writer, o ProbeOptions) error {
	if o.Timeout <= 0 {
		o.Timeout = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var (
		line string
		err  error
	)
	switch o.Kind {
	case "http":
		line, err = probeHTTP(ctx, o.To, o.Expect)
	case "dns":
		line, err = probeDNS(ctx, o.To, o.Name, o.Expect)
	case "ping":
		line, err = probePing(ctx, o.To, o.Size, o.DF)
	case "udp-frag":
		line, err = probeUDPFrag(ctx, o.To, o.Size, o.Timeout)
	default:
		return fmt.Errorf("probe kind %q: use one of %s", o.Kind, strings.Join(ProbeKinds, ", "))
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, line)
	return err
}

func probeHTTP(ctx context.Context, url, expect string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", fmt.Errorf("http probe %q: %w", url, err)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if errors.Is(err, context.DeadlineExceeded) {
		return "", fmt.Errorf("GET %s: no answer (timed out)", url)
	}
	if err != nil {
		var uerr *neturl.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL is said once
		}
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	if expect != "" && !strings.Contains(string(body), expect) {
		return "", fmt.Errorf("GET %s: answered %q, want %q", url, strings.TrimSpace(string(body)), expect)
	}
	return strings.TrimSpace(string(body)), nil
}

func probeDNS(ctx context.Context, server, name, expect string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("dns probe: no --name to resolve")
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server)
	}}
	addrs, err := r.LookupHost(ctx, name)
	if err != nil {
		return "", fmt.Errorf("resolve %s via %s: %w", name, server, err)
	}
	if expect != "" && !slices.Contains(addrs, expect) {
		return "", fmt.Errorf("resolve %s via %s: got %v, want %s", name, server, addrs, expect)
	}
	return fmt.Sprintf("%s -> %s", name, strings.Join(addrs, ",")), nil
}

func probeUDPFrag(ctx context.Context, target string, size int, timeout time.Duration) (string, error) {
	if size <= 0 {
		size = 4000
	}
	res, err := labtools.BigUDP(ctx, target, size, size, timeout/3)
	if err != nil {
		return "", fmt.Errorf("udp %d bytes to %s: %w", size, target, err)
	}
	switch {
	case res.Refused:
		return "", fmt.Errorf("udp %d bytes to %s: port unreachable", size, target)
	case !res.RequestIntact || !res.ReplyIntact:
		return "", fmt.Errorf("udp %d bytes to %s: request intact %v, reply %d bytes intact %v",
			size, target, res.RequestIntact, res.Received, res.ReplyIntact)
	}
	return fmt.Sprintf("udp %d bytes each way to %s intact", size, target), nil
}

// pathMTU is the kernel's MTU towards dst (the route's MTU, or the device's).
func pathMTU(dst string) (int, error) {
	c, err := net.Dial("udp4", net.JoinHostPort(dst, "9"))
	if err != nil {
		return 0, fmt.Errorf("find path MTU to %s: %w", dst, err)
	}
	defer c.Close()
	raw, err := c.(*net.UDPConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var mtu int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		mtu, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_MTU)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("read path MTU to %s: %w", dst, serr)
	}
	return mtu, nil
}

// probePing sends one ICMP echo of size payload bytes (0: as large as the path MTU
// allows) with DF set or cleared, and waits for the matching reply.
func probePing(ctx context.Context, dst string, size int, df bool) (string, error) {
	if size == 0 {
		mtu, err := pathMTU(dst)
		if err != nil {
			return "", err
		}
		size = mtu - 28 // IPv4 (20) and ICMP (8) headers
	}
	c, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
	if err != nil {
		return "", fmt.Errorf("open ICMP socket: %w (needs CAP_NET_RAW)", err)
	}
	defer c.Close()
	if err := setDF(c, df); err != nil {
		return "", err
	}
	id, seq := os.Getpid()&0xffff, int(time.Now().UnixNano()&0x7fff)
	msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq, Data: make([]byte, size)}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return "", err
	}
	what := fmt.Sprintf("ICMP echo %d bytes (DF %v) to %s", size, df, dst)
	if _, err := c.WriteTo(b, &net.IPAddr{IP: net.ParseIP(dst)}); err != nil {
		return "", fmt.Errorf("send %s: %w", what, err)
	}
	deadline, _ := ctx.Deadline()
	_ = c.SetReadDeadline(deadline)
	buf := make([]byte, 65536)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return "", fmt.Errorf("%s: no reply: %w", what, err)
		}
		if got, ok := echoReply(buf[:n], seq); ok && from.String() == dst {
			if got != size {
				return "", fmt.Errorf("%s: reply carried %d bytes", what, got)
			}
			return what + ": replied", nil
		}
	}
}

// echoReply returns the payload size of an echo reply with sequence seq. Replies are
// matched by sequence, not id: a raw socket sees every echo reply of its netns.
func echoReply(b []byte, seq int) (int, bool) {
	m, err := icmp.ParseMessage(1, b)
	if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
		return 0, false
	}
	e, ok := m.Body.(*icmp.Echo)
	if !ok || e.Seq != seq {
		return 0, false
	}
	return len(e.Data), true
}

// setDF makes the socket's datagrams carry DF (and never be fragmented locally) or
// not carry it (fragmented to the path MTU).
func setDF(c *icmp.PacketConn, df bool) error {
	pc, ok := c.IPv4PacketConn().PacketConn.(*net.IPConn)
	if !ok {
		return errors.New("set DF: not an IP socket")
	}
	raw, err := pc.SyscallConn()
	if err != nil {
		return err
	}
	v := syscall.IP_PMTUDISC_DONT
	if df {
		v = syscall.IP_PMTUDISC_DO
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_MTU_DISCOVER, v)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("set DF %v: %w", df, serr)
	}
	return nil
}
