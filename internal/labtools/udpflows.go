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
// translated sources: the check of masquerading many concurrent flows.
func UDPFlows(ctx context.Context, target string, n int, timeout time.Duration) (UDPFlowsResult, error) {
	raiseFileLimit(n + 64)
	res := UDPFlowsResult{Flows: n}
	var mu sync.Mutex
	seen, ips := map[string]bool{}, map[string]bool{}
	var wg sync.WaitGroup
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := net.Dial("udp", target)
		if err != nil {
			return res, fmt.Errorf("open flow %d: %w", i, err)
		}
		conns = append(conns, c)
	}
	// All sockets stay open together (concurrent flows in any NAT on the way); the
	// sends are paced in batches and retried twice, as a UDP client would, so that a
	// datagram dropped by a busy receiver's socket buffer is not mistaken for a lost flow.
	deadline := time.Now().Add(timeout)
	for i, c := range conns {
		if i > 0 && i%100 == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		wg.Add(1)
		go func(c net.Conn) {
			defer wg.Done()
			buf := make([]byte, 256)
			for attempt := 0; attempt < 3; attempt++ {
				if _, err := c.Write([]byte("flow")); err != nil {
					return
				}
				wait := time.Now().Add(timeout / 3)
				if wait.After(deadline) {
					wait = deadline
				}
				_ = c.SetReadDeadline(wait)
				m, err := c.Read(buf)
				if errors.Is(err, syscall.ECONNREFUSED) { // ICMP port unreachable: no one to answer
					mu.Lock()
					res.Refused++
					mu.Unlock()
					return
				}
				if err != nil {
					continue
				}
				_, src, ok := strings.Cut(strings.TrimSpace(string(buf[:m])), "client=")
				if !ok {
					return
				}
				mu.Lock()
				res.Replies++
				seen[src] = true
				if host, _, err := net.SplitHostPort(src); err == nil {
					ips[host] = true
				}
				mu.Unlock()
				return
			}
		}(c)
	}
	wg.Wait()
	res.SeenSources = len(seen)
	for ip := range ips {
		res.SourceIPs = append(res.SourceIPs, ip)
	}
	return res, ctx.Err()
}

func raiseFileLimit(want int) {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < uint64(want) {
		l.Cur = min(uint64(want), l.Max)
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}
