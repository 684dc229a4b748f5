package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/myelin-net/myelin/internal/link"
)

// hostAddrResync is how often the host-addresses loop lists the node's addresses
// again without being told of a change (a missed netlink message, a subscription
// that failed).
const hostAddrResync = 30 * time.Second

// hostAddrLoop keeps myelin_host_addrs equal to the IPv4 addresses of the node's
// network namespace, as the loop "host-addresses": what the host's stack sends into
// a pod from one of them is the node's own traffic, which NetworkPolicy lets into
// isolated pods (kubelet probes). The node IP is exempt without it; the others
// matter where the kernel picks another address as the source of the host's
// connections to pods (a global address on lo, a second NIC listed first). It
// lists them at start, after each address change netlink reports, and every
// hostAddrResync; the map is pinned, so a restarted agent's first list only
// corrects it.
type hostAddrLoop struct {
	// list returns the node's addresses (netlink), subscribe starts the address
	// change messages (netlink.AddrSubscribeWithOptions: ch is closed when the
	// subscription ends), set writes the map (Datapath.SetHostAddresses).
	list      func() ([]netip.Addr, error)
	subscribe func(ch chan<- netlink.AddrUpdate, done <-chan struct{}) error
	set       func([]netip.Addr) error
	every     time.Duration
	loops     *loops
	log       *slog.Logger
	last      []netip.Addr // what the last successful sync wrote
}

func newHostAddrLoop(set func([]netip.Addr) error, loops *loops, log *slog.Logger) *hostAddrLoop {
	return &hostAddrLoop{list: listHostAddrs, subscribe: subscribeHostAddrs, set: set, every: hostAddrResync, loops: loops, log: log}
}

// listHostAddrs is every IPv4 address of the current network namespace.
func listHostAddrs() ([]netip.Addr, error) {
	addrs, err := link.Dump("addresses", func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return nil, fmt.Errorf("list the node's addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

func subscribeHostAddrs(ch chan<- netlink.AddrUpdate, done <-chan struct{}) error {
	return netlink.AddrSubscribeWithOptions(ch, done, netlink.AddrSubscribeOptions{})
}

// Run implements runner.
func (l *hostAddrLoop) Run(ctx context.Context) {
	tick := time.NewTicker(l.every)
	defer tick.Stop()
	for ctx.Err() == nil {
		updates := make(chan netlink.AddrUpdate, 64)
		done := make(chan struct{})
		if err := l.subscribe(updates, done); err != nil {
			l.loops.report("host-addresses", fmt.Errorf("subscribe to address changes (listing every %v instead): %w", l.every, err))
			close(updates)
		}
		l.sync()
		l.follow(ctx, updates, tick.C)
		close(done)
	}
}

// follow syncs after each batch of address changes and each tick, until ctx ends
// or the subscription does (updates closed); then it waits for the next tick so a
// failing subscription is not retried in a busy loop.
func (l *hostAddrLoop) follow(ctx context.Context, updates <-chan netlink.AddrUpdate, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-updates:
			if !ok {
				select {
				case <-ctx.Done():
				case <-tick:
				}
				return
			}
			for drained := false; !drained; { // one sync for a burst (an address flush)
				select {
				case _, ok = <-updates:
					drained = !ok
				default:
					drained = true
				}
			}
			l.sync()
		case <-tick:
			l.sync()
		}
	}
}

// sync writes the node's current addresses; a failure is the loop's error and the
// map keeps what it held (addresses gone stay exempt until the next sync).
func (l *hostAddrLoop) sync() {
	addrs, err := l.list()
	if err == nil {
		slices.SortFunc(addrs, netip.Addr.Compare)
		addrs = slices.Compact(addrs)
		err = l.set(addrs)
	}
	l.loops.report("host-addresses", err)
	if err != nil {
		l.log.Error("write the node's addresses for NetworkPolicy's host exemption", "err", err)
		return
	}
	if !slices.Equal(addrs, l.last) {
		l.log.Info("node addresses exempt from NetworkPolicy (the host's own traffic into pods)", "addresses", addrs)
		l.last = addrs
	}
}
