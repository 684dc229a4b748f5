package clusterhealth

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// HelloPath is what a prober GETs of a peer's health server; the answer names the
// node (Hello), so a probe that reached the wrong node fails.
const HelloPath = "/hello"

// Hello is the health server's answer.
type Hello struct {
	Node string `json:"node"`
	// OverlayToNode says the node's datapath gives what the overlay brings to its IP
	// the uplink's Service stage (tunnel mode, this version on): other nodes may send
	// it their pods' packets to its IP encapsulated (tunnel-pod-to-node).
	OverlayToNode bool `json:"overlayToNode,omitempty"`
}

// ping sends one ICMP echo to ip and waits for its reply (a raw socket: the agent
// needs CAP_NET_RAW, which the chart grants). It returns the round trip.
func ping(ctx context.Context, ip netip.Addr) (time.Duration, error) {
	c, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
	if err != nil {
		return 0, fmt.Errorf("open ICMP socket: %w", err)
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	id, seq := rand.IntN(1<<16), rand.IntN(1<<16)
	token := []byte("myelin-health-" + strconv.Itoa(rand.Int()))
	msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq, Data: token}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if _, err := c.WriteTo(b, &net.IPAddr{IP: ip.AsSlice()}); err != nil {
		return 0, fmt.Errorf("send ICMP echo to %s: %w", ip, err)
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return 0, fmt.Errorf("no ICMP echo reply from %s: %w", ip, err)
		}
		if isReply(buf[:n], from, ip, id, seq, token) {
			return time.Since(start), nil
		}
	}
}

// isReply is whether b, received from from, is the echo reply of our request.
func isReply(b []byte, from net.Addr, ip netip.Addr, id, seq int, token []byte) bool {
	a, ok := from.(*net.IPAddr)
	if !ok || !a.IP.Equal(ip.AsSlice()) {
		return false
	}
	m, err := icmp.ParseMessage(1, b)
	if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
		return false
	}
	e, ok := m.Body.(*icmp.Echo)
	return ok && e.ID == id && e.Seq == seq && bytes.Equal(e.Data, token)
}

// hello GETs HelloPath of the health server at ip:port from the local address src
// (invalid: the kernel picks) on a new connection, and checks that it is peer's. It
// returns the time from connect to answer, and the answer.
func hello(ctx context.Context, src, ip netip.Addr, port int, peer string) (time.Duration, Hello, error) {
	d := &net.Dialer{}
	if src.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
	}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	url := "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(port)) + HelloPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, Hello{}, err
	}
	start := time.Now()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0, Hello{}, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	var h Hello
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || resp.StatusCode != http.StatusOK {
		return 0, Hello{}, fmt.Errorf("GET %s: status %d, not a myelin health answer (%v)", url, resp.StatusCode, err)
	}
	if h.Node != peer {
		return 0, Hello{}, fmt.Errorf("GET %s: answered by node %q, not %q (two nodes share an address?)", url, h.Node, peer)
	}
	return time.Since(start), h, nil
}
