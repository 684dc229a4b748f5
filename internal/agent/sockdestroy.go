package agent

import (
	"context"
	"log/slog"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/endpoint"
)

// udpCloser closes the node's connected UDP sockets to backends that went away
// (socket-LB on): the Service manager deletes a backend once no Service lists it,
// and clients connected to it through socket-LB would otherwise keep sending to a
// dead address. It works off a queue, so the Service loop never waits for it.
type udpCloser struct {
	*datapath.Datapath
	eps   *endpoint.Manager
	queue chan datapath.Backend
	log   *slog.Logger
}

// udpCloserQueue bounds the backends waiting to have their sockets closed; beyond it
// a backend's sockets are left (logged), as they would be without socket-LB.
const udpCloserQueue = 4096

func newUDPCloser(dp *datapath.Datapath, eps *endpoint.Manager, log *slog.Logger) *udpCloser {
	return &udpCloser{Datapath: dp, eps: eps, queue: make(chan datapath.Backend, udpCloserQueue), log: log}
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
	select {
	case u.queue <- b:
	default:
		u.log.Warn("too many removed backends queued: connected UDP sockets to this one stay open", "backend", b.String())
	}
	return nil
}

// Run closes the queued backends' sockets in the agent's network namespace (the
// node's processes) and in every pod's, until ctx ends.
func (u *udpCloser) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-u.queue:
			netns := []string{""}
			for _, ep := range u.eps.List() {
				if ep.NetNS != "" {
					netns = append(netns, ep.NetNS)
				}
			}
			n, err := u.DestroyUDPSockets(b, netns)
			if err != nil {
				u.log.Warn("close UDP sockets to a removed backend", "backend", b.String(), "err", err)
			}
			if n > 0 {
				u.log.Info("closed UDP sockets connected to a removed backend", "backend", b.String(), "sockets", n)
			}
		}
	}
}
