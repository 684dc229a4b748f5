// Package connlimit bounds the connections a TCP server holds open, per source
// address and in all. The agent's and the relay's servers (metrics, Hubble, node
// health, Service health checks, the service map) listen on addresses every pod
// can reach; each open connection costs the server a file descriptor, a goroutine
// and its buffers, and the handshake and header timeouts free a stalled one only
// after seconds. Without a bound, one pod opening tens of thousands of idle
// connections would exhaust the agent's descriptors or memory. A connection over a
// bound is closed as soon as it is accepted (the peer sees it end before any
// answer), so other sources keep being served. Bound.Take applies the same bounds
// to what a server holds per request (the service map's flow streams).
package connlimit

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Three bounds, by who connects. Each is per source address (an IPv6 source per /64:
// one host holds a whole /64) and in all; the totals are a memory backstop (an idle
// connection costs a server ~10 KB), the per-source bounds are what stops one pod,
// and filling a total takes total/perSource sources (256 pods or addresses for
// Clients and Probes).
//
// Clients: metrics scrapers, the relay, Hubble and node-local CLIs need a handful of
// connections each, so one pod holds at most 64 of the agent's servers' connections,
// over all their ports.
//
// Probes: the health ports (Service health check ports, kube-proxy's healthz, node
// health). A cloud load balancer probes every health check port and kube-proxy's
// healthz from one prober address, peer agents probe node health; those servers keep
// no idle connection (keep-alives off), so a prober holds one only while a probe is in
// flight and 64 is a burst of 64 probes at once. With 512 per source and idle
// connections kept a minute, 32 pods each holding 512 (a request every minute)
// filled the total and every load balancer's probe was refused (found by the
// attacker review of 2026-12-06). A connection that sends no request still holds
// its slot until the server's header timeout (5 s, node health 2 s): 256 sources
// reconnecting so can still fill it.
//
// Shared: the service map's listener (myelin ui, a process of its own), whose
// viewers may come through one ingress.
var (
	Clients = New(64, 16384)
	Probes  = New(64, 16384)
	Shared  = New(512, 16384)
)

// logEvery is how often refusals are logged at most (with their count since).
const logEvery = 10 * time.Second

// Bound counts the connections open on the listeners it wraps, per source address
// and in all. Safe for concurrent use.
type Bound struct {
	perSource, total int

	mu       sync.Mutex
	open     int
	bySource map[netip.Addr]int
	refused  atomic.Uint64
	logged   time.Time // last refusal log
	unlogged uint64    // refusals since
}

// New returns a Bound of perSource connections from one source address and total
// in all.
func New(perSource, total int) *Bound {
	return &Bound{perSource: perSource, total: total, bySource: map[netip.Addr]int{}}
}

// Refused is how many connections the process's servers closed for being over
// Clients', Probes' or Shared's bounds (myelin_server_connections_refused_total).
func Refused() uint64 { return Clients.Refused() + Probes.Refused() + Shared.Refused() }

// Wrap returns l with b's bounds: what names the server in the log line that
// reports refusals ("metrics (prometheus-serve-addr)"); log may be nil.
func (b *Bound) Wrap(l net.Listener, what string, log *slog.Logger) *Listener {
	return &Listener{Listener: l, b: b, what: what, log: log}
}

// PerSource is how many connections b lets one source address hold.
func (b *Bound) PerSource() int { return b.perSource }

// Open is how many connections (or slots Take gave out) b counts now.
func (b *Bound) Open() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}

// Refused is how many connections were closed for being over a bound.
func (b *Bound) Refused() uint64 { return b.refused.Load() }

// Listener is a net.Listener whose Accept returns only connections within its
// Bound; the others it closes and counts.
type Listener struct {
	net.Listener
	b    *Bound
	what string // names the server in the log
	log  *slog.Logger
}

// Accept returns the next connection within the bounds.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceOf(c)
		if l.b.admit(src, l.what, l.log) {
			return &conn{Conn: c, b: l.b, src: src}, nil
		}
		c.Close()
	}
}

// sourceOf is what c's remote address counts as (sourceOfAddr).
func sourceOf(c net.Conn) netip.Addr { return sourceOfAddr(c.RemoteAddr().String()) }

// sourceOfAddr is what a remote address (ip:port) counts as: an IPv4 address, or
// an IPv6 address's /64; addresses that are none (unix sockets) share the zero
// address.
func sourceOfAddr(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}
	}
	a := ap.Addr().Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// Take takes one of b's slots for remote (an http.Request's RemoteAddr), for what a
// server holds per request rather than per connection (a long stream, which one
// connection after another can open); ok is false when remote's source, or all
// sources together, already hold b's bound (the refusal is counted, not logged: the
// caller answers it). release gives the slot back; calls after the first do nothing.
func (b *Bound) Take(remote string) (release func(), ok bool) {
	src := sourceOfAddr(remote)
	if !b.admit(src, "", nil) {
		return nil, false
	}
	var once sync.Once
	return func() { once.Do(func() { b.release(src) }) }, true
}

func (b *Bound) admit(src netip.Addr, what string, log *slog.Logger) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open < b.total && b.bySource[src] < b.perSource {
		b.open++
		b.bySource[src]++
		return true
	}
	b.refused.Add(1)
	b.unlogged++
	if now := time.Now(); log != nil && now.Sub(b.logged) >= logEvery {
		log.Warn("refusing connections over the servers' bound", "server", what, "source", src.String(),
			"refused", b.unlogged, "open", b.open, "fromSource", b.bySource[src],
			"perSourceLimit", b.perSource, "totalLimit", b.total)
		b.logged, b.unlogged = now, 0
	}
	return false
}

func (b *Bound) release(src netip.Addr) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.open--
	if b.bySource[src]--; b.bySource[src] <= 0 {
		delete(b.bySource, src)
	}
}

// conn gives its slot back when closed, once. It is not a *net.TCPConn: servers
// that set socket options only on that type (gRPC's TCP_USER_TIMEOUT from its
// keepalive) skip them; gRPC's keepalive pings still end a dead peer's connection.
type conn struct {
	net.Conn
	b    *Bound
	src  netip.Addr
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.b.release(c.src) })
	return err
}

// CloseWrite half-closes a TCP connection (net/http uses it, when present, to
// flush a response before closing).
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
