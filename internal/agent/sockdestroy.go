package agent

import (
	"context"
	"log/slog"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/endpoint"
	"github.com/myelin-net/myelin/internal/service"
)

// udpCloser closes the node's connected UDP sockets to backends that went away
// (socket-LB on): the Service manager deletes a backend once no Service lists it,
// and clients connected to it through socket-LB would otherwise keep sending to a
// dead address. It also closes those connected through one frontend to a backend
// that left it while other frontends keep it (departed; service.Departure). It works
// off a queue, so the Service loop never waits for it.
type udpCloser struct {
	*datapath.Datapath
	eps   *endpoint.Manager
	queue chan datapath.UDPSocketTarget
	log   *slog.Logger
	// hidden are the live pods' netns paths that are no namespace for the agent
	// (netns), logged once each.
	mu     sync.Mutex
	hidden map[string]bool
}

// udpCloserQueue bounds the backends waiting to have their sockets closed; beyond it
// a backend's sockets are left open (logged), and their clients keep sending to its
// address (socket-LB fixed it at connect(); the tc path would have moved them).
const udpCloserQueue = 4096

func newUDPCloser(dp *datapath.Datapath, eps *endpoint.Manager, log *slog.Logger) *udpCloser {
	return &udpCloser{Datapath: dp, eps: eps, queue: make(chan datapath.UDPSocketTarget, udpCloserQueue), log: log,
		hidden: map[string]bool{}}
}

// departed queues the closing of the sockets connected through d's frontend to its
// backend (a service.Manager OnDeparture hook: it never blocks). TCP connections are
// left, as when a backend is deleted.
func (u *udpCloser) departed(d service.Departure) {
	if d.Frontend.Proto != unix.IPPROTO_UDP {
		return
	}
	fe := d.Frontend
	u.enqueue(datapath.UDPSocketTarget{Backend: d.Backend, Via: &fe})
}

func (u *udpCloser) enqueue(t datapath.UDPSocketTarget) {
	select {
	case u.queue <- t:
	default:
		u.log.Warn("too many removed backends queued: connected UDP sockets to this one stay open", "backend", t.String())
	}
}

// DeleteBackend deletes backend id and queues the closing of the sockets to it.
func (u *udpCloser) DeleteBackend(id uint32) error {
	b, found, lerr := u.Datapath.Backend(id)
	if err := u.Datapath.DeleteBackend(id); err != nil {
		return err
	}
	if lerr != nil || !found {
		return nil
	}
	u.enqueue(datapath.UDPSocketTarget{Backend: b})
	return nil
}

// Run closes the queued backends' sockets in the agent's network namespace (the
// node's processes) and in every pod's, until ctx ends: all those queued by then in
// one pass over the namespaces, so backends removed in a burst cost one pass.
func (u *udpCloser) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-u.queue:
			u.close(u.batch(t))
		}
	}
}

// batch is first and the targets queued behind it, each once, at most a queue's
// worth (producers that keep up with it don't hold the pass back).
func (u *udpCloser) batch(first datapath.UDPSocketTarget) []datapath.UDPSocketTarget {
	seen := map[string]bool{first.String(): true}
	out := []datapath.UDPSocketTarget{first}
	for range udpCloserQueue {
		select {
		case t := <-u.queue:
			if k := t.String(); !seen[k] {
				seen[k] = true
				out = append(out, t)
			}
		default:
			return out
		}
	}
	return out
}

// netns lists the agent's network namespace ("") and every pod's. A pod's path that
// is no network namespace for the agent (missing, or a file the runtime's namespace
// mount never reached: an agent in a container without the runtime's netns directory,
// the chart's socketLB.netnsPath, or without its propagation) is left out and logged
// once while its pod lives, in one line per pass: its sockets are not closed.
func (u *udpCloser) netns() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := []string{""}
	hidden := map[string]bool{} // the live ones only: pods come and go
	var fresh []string
	for _, ep := range u.eps.List() {
		if ep.NetNS == "" {
			continue
		}
		var st unix.Statfs_t
		if err := unix.Statfs(ep.NetNS, &st); err != nil || st.Type != unix.NSFS_MAGIC {
			if !u.hidden[ep.NetNS] {
				fresh = append(fresh, ep.Namespace+"/"+ep.Pod+" ("+ep.NetNS+")")
			}
			hidden[ep.NetNS] = true
			continue
		}
		out = append(out, ep.NetNS)
	}
	u.hidden = hidden
	if len(fresh) > 0 {
		u.log.Warn("pods' network namespaces are not visible to the agent (or gone with their pods): their UDP sockets "+
			"connected to removed Service backends stay open; mount the runtime's netns directory into the agent "+
			"(chart value socketLB.netnsPath)", "pods", len(fresh), "first", fresh[0])
	}
	return out
}

// sweep closes, in the agent's network namespace and every pod's, the UDP sockets
// socket-LB connected to a backend no longer programmed (datapath.SweepUDPSockets): the
// Service watcher runs it once, after its first pass and before any other change,
// for the closes the queue lost (queued when the last agent stopped, past its bound).
func (u *udpCloser) sweep() {
	n, err := u.SweepUDPSockets(u.netns())
	if err != nil {
		u.log.Warn("close UDP sockets to backends no longer programmed", "err", err)
	}
	if n > 0 {
		u.log.Info("closed UDP sockets connected to backends no longer programmed", "sockets", n)
	}
}

// close closes the targets' sockets in the agent's network namespace and every pod's.
func (u *udpCloser) close(targets []datapath.UDPSocketTarget) {
	n, err := u.DestroyUDPSockets(targets, u.netns())
	if err != nil {
		u.log.Warn("close UDP sockets to removed backends", "backends", len(targets), "first", targets[0].String(), "err", err)
	}
	if n > 0 {
		u.log.Info("closed UDP sockets connected to removed backends", "backends", len(targets), "first", targets[0].String(), "sockets", n)
	}
}
