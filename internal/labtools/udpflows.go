package labtools

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"
)

// UDPFlowsResult is what UDPFlows observed.
type UDPFlowsResult struct {
	Flows   int `json:"flows"`
	Replies int `json:"replies"`
	// Refused flows got ICMP port unreachable (ECONNREFUSED) instead of a reply.
	Refused int `json:"refused"`
	// SeenSources counts the distinct source addresses (IP:port) the server reported:
	// equal to Replies when every flow kept a distinct translated port.
	SeenSources int      `json:"seenSources"`
	SourceIPs   []string `json:"sourceIPs"` // distinct source IPs the server saw
}

// UDPFlows opens n UDP sockets at once, sends a datagram from each to target (a
// `lab serve` UDP endpoint; retried twice without a reply), and collects the replies,
// each naming the source the server saw. It answers how many flows got a reply and through how many distinct
// translated sources: the check of masquerading many concurrent flows. firstPort,
// unless 0, is the local port of the first flow, the next flows' follow it (the
// kernel picks them otherwise), so two runs can be told apart by their tuples.
func UDPFlows(ctx context.Context, target string, n, firstPort int, timeout time.Duration) (UDPFlowsResult, error) {
	raiseFileLimit(n + 64)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		var d net.Dialer
		if firstPort != 0 {
			d.LocalAddr = &net.UDPAddr{Port: firstPort + i}
		}
		c, err := d.DialContext(ctx, "udp", target)
		if err != nil {
			return UDPFlowsResult{Flows: n}, fmt.Errorf("open flow %d: %w", i, err)
		}
		conns = append(conns, c)
	}
	// All sockets stay open together (concurrent flows in any NAT on the way); the
	// sends are paced in batches and retried twice, as a UDP client would, so that a
	// datagram dropped by a busy receiver's socket buffer is not mistaken for a lost flow.
	deadline := time.Now().Add(timeout)
	t := udpFlowTally{seen: map[string]bool{}, ips: map[string]bool{}}
	var wg sync.WaitGroup
	for i, c := range conns {
		if i > 0 && i%100 == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		wg.Add(1)
		go func(c net.Conn) {
			defer wg.Done()
			t.add(exchangeUDP(c, timeout, deadline))
		}(c)
	}
	wg.Wait()
	return t.result(n), ctx.Err()
}

// udpAnswer is how one flow of UDPFlows was answered.
type udpAnswer int

const (
	udpNoAnswer udpAnswer = iota
	udpReplied            // the server named the source it saw
	udpRefused            // ICMP port unreachable: no one to answer
)

// exchangeUDP sends one flow's datagram, retried twice without a reply, and
// returns how it was answered and, when replied, the source the server saw.
func exchangeUDP(c net.Conn, timeout time.Duration, deadline time.Time) (udpAnswer, string) {
	buf := make([]byte, 256)
	for attempt := 0; attempt < 3; attempt++ {
		if _, err := c.Write([]byte("flow")); err != nil {
			return udpNoAnswer, ""
		}
		wait := time.Now().Add(timeout / 3)
		if wait.After(deadline) {
			wait = deadline
		}
		_ = c.SetReadDeadline(wait)
		m, err := c.Read(buf)
		if errors.Is(err, syscall.ECONNREFUSED) {
			return udpRefused, ""
		}
		if err != nil {
			continue
		}
		if _, src, ok := strings.Cut(strings.TrimSpace(string(buf[:m])), "client="); ok {
			return udpReplied, src
		}
		return udpNoAnswer, ""
	}
	return udpNoAnswer, ""
}

// udpFlowTally counts the answers of UDPFlows' concurrent flows.
type udpFlowTally struct {
	mu               sync.Mutex
	replies, refused int
	seen, ips        map[string]bool
}

func (t *udpFlowTally) add(a udpAnswer, src string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch a {
	case udpRefused:
		t.refused++
	case udpReplied:
		t.replies++
		t.seen[src] = true
		if host, _, err := net.SplitHostPort(src); err == nil {
			t.ips[host] = true
		}
	}
}

func (t *udpFlowTally) result(flows int) UDPFlowsResult {
	res := UDPFlowsResult{Flows: flows, Replies: t.replies, Refused: t.refused, SeenSources: len(t.seen)}
	for ip := range t.ips {
		res.SourceIPs = append(res.SourceIPs, ip)
	}
	return res
}

func raiseFileLimit(want int) {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < uint64(want) {
		l.Cur = min(uint64(want), l.Max)
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}
