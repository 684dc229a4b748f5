// Package connlimit bounds the connections a TCP server holds open, per source
// address and in all. The agent's and the relay's servers (metrics, Hubble, node
// health, Service health checks, the service map) listen on addresses every pod
// can reach; each open connection costs the server a file descriptor, a goroutine
// and its buffers, and the handshake and header timeouts free a stalled one only
// after seconds. Without a bound, one pod opening tens of thousands of idle
// connections would exhaust the agent's descriptors or memory. A connection over a
// bound is closed as soon as it is accepted (the peer sees it end before any
// answer), so other sources keep being served.
package connlimit

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// The bounds of the process's servers together (Wrap): a Prometheus server, a
// relay or a peer node needs a handful of connections; a source behind one NAT
// address (a load balancer's health checker, several users of the relay) a few
// dozen. One pod cannot hold more than PerSource of the agent's connections, over
// all its ports.
const (
	PerSource = 64
	Total     = 1024
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

// process bounds every server of this process together.
var process = New(PerSource, Total)

// Wrap bounds l with the process's other servers to PerSource connections from one
// source address and Total in all.
func Wrap(l net.Listener, what string, log *slog.Logger) *Listener { return process.Wrap(l, what, log) }

// Refused is how many connections the process's servers closed for being over
// the bounds (myelin_server_connections_refused_total).
func Refused() uint64 { return process.Refused() }

// Wrap returns l with b's bounds: what names the server in the log line that
// reports refusals ("metrics (prometheus-serve-addr)"); log may be nil.
func (b *Bound) Wrap(l net.Listener, what string, log *slog.Logger) *Listener {
	return &Listener{Listener: l, b: b, what: what, log: log}
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

// sourceOf is c's remote address; connections that have none (unix sockets) share
// the zero address.
func sourceOf(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
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

// conn gives its slot back when closed, once.
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
