package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/myelin-net/myelin/internal/link"
)

const (
	// hostAddrResync is how often the host-addresses loop lists the node's
	// addresses again without being told of a change (a missed message).
	hostAddrResync = 30 * time.Second
	// hostAddrRetry is how long it waits before subscribing again after its
	// subscription ended (the socket's buffer overran) or failed.
	hostAddrRetry = time.Second
)

// hostAddrLoop keeps myelin_host_addrs equal to the IPv4 addresses of the node's
// network namespace, as the loop "host-addresses": what the host's stack sends into
// a pod from one of them is the node's own traffic, which NetworkPolicy lets into
// isolated pods (kubelet probes). The node IP is exempt without it; the others
// matter where the kernel picks another address as the source of the host's
// connections to pods (a global address on lo, a second NIC listed first). It
// lists them at start, after each IPv4 address message from netlink, and every
// hostAddrResync; the map is pinned, so a restarted agent's first list only
// corrects it.
type hostAddrLoop struct {
	// list returns the node's addresses (netlink), subscribe starts the address
	// messages (netlink.AddrSubscribeWithOptions: ch is closed when the
	// subscription ends, onErr says why), set writes the map
	// (Datapath.SetHostAddresses).
	list      func() ([]netip.Addr, error)
	subscribe func(ch chan<- netlink.AddrUpdate, done <-chan struct{}, onErr func(error)) error
	set       func([]netip.Addr) error
	// changed is called after a sync found nodeIP come or go, or a message named
	// it: the node loops sync again (nodeWatch.kick), since the tunnel loop's
	// encap routes name the node IP as their source and die with it (removed and
	// added again by a network manager reconfiguring the uplink), which the 30 s
	// Node resync would otherwise be the one to notice. Other addresses don't
	// call it (kube-proxy's IPVS adds one per Service).
	changed func()
	nodeIP  netip.Addr
	every   time.Duration
	retry   time.Duration
	loops   *loops
	log     *slog.Logger
	last    []netip.Addr // what the last successful sync wrote
	listed  []netip.Addr // what the last successful list found
	synced  bool         // a list succeeded: the Node loops' first syncs need no kick
	// kick says a burst named the node IP since the last successful list: a failed
	// list keeps it for the next one.
	kick bool
	// subErr is why the loop has no subscription, reported with each sync until
	// one works again.
	subErr error
}

func newHostAddrLoop(set func([]netip.Addr) error, nodeIP netip.Addr, changed func(), loops *loops,
	log *slog.Logger) *hostAddrLoop {
	return &hostAddrLoop{list: listHostAddrs, subscribe: subscribeHostAddrs, set: set, changed: changed,
		nodeIP: nodeIP, every: hostAddrResync, retry: hostAddrRetry, loops: loops, log: log}
}

// listHostAddrs is every IPv4 address of the current network namespace in the
// order the kernel considers them as a source (by device, the lowest ifindex
// first): SetHostAddresses keeps the first ones when there are more than fit.
func listHostAddrs() ([]netip.Addr, error) {
	addrs, err := link.Dump("addresses", func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return nil, fmt.Errorf("list the node's addresses: %w", err)
	}
	slices.SortStableFunc(addrs, func(a, b netlink.Addr) int { return cmp.Compare(a.LinkIndex, b.LinkIndex) })
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

func subscribeHostAddrs(ch chan<- netlink.AddrUpdate, done <-chan struct{}, onErr func(error)) error {
	return netlink.AddrSubscribeWithOptions(ch, done, netlink.AddrSubscribeOptions{ErrorCallback: onErr})
}

// Run implements runner.
func (l *hostAddrLoop) Run(ctx context.Context) {
	tick := time.NewTicker(l.every)
	defer tick.Stop()
	for ctx.Err() == nil {
		wait := l.follow(ctx, tick.C)
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("the node's address changes are not followed for a moment", "err", l.subErr, "retryIn", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// follow subscribes to the address messages, syncs, and syncs again after each
// batch of messages about IPv4 addresses and each tick, until ctx ends or the
// subscription does. It returns how long to wait before subscribing again:
// hostAddrRetry after a subscription ended (netlink's last error is the loop's),
// the resync period after subscribing failed (the next try lists again).
func (l *hostAddrLoop) follow(ctx context.Context, tick <-chan time.Time) time.Duration {
	updates := make(chan netlink.AddrUpdate, 256)
	done := make(chan struct{})
	var lastErr atomic.Pointer[error] // netlink reports non-fatal trouble too: the last one ended it
	l.subErr = l.subscribe(updates, done, func(err error) { lastErr.Store(&err) })
	if l.subErr != nil {
		l.subErr = fmt.Errorf("subscribe to address changes (listing every %v meanwhile): %w", l.every, l.subErr)
		l.sync(false)
		return l.every
	}
	defer func() {
		close(done)
		go func() { // the subscription's sender must not block on a full channel
			for range updates {
			}
		}()
	}()
	l.sync(false)
	for {
		select {
		case <-ctx.Done():
			return 0
		case u, ok := <-updates:
			v4, named := false, false
			if ok {
				v4, named, ok = drainAddrUpdates(u, updates, l.nodeIP)
			}
			if !ok {
				l.subErr = errors.New("address changes: subscription ended, subscribing again")
				if err := lastErr.Load(); err != nil {
					l.subErr = fmt.Errorf("address changes: subscription ended, subscribing again: %w", *err)
				}
				l.loops.report("host-addresses", l.subErr)
				return l.retry
			}
			if v4 {
				l.sync(named)
			}
		case <-tick:
			l.sync(false)
		}
	}
}

// drainAddrUpdates takes the messages already queued after first (a burst, such
// as an address flush, is one sync) and says whether any is about an IPv4 address,
// whether any names watch (the node IP: gone and back within one burst leaves the
// list as it was, the routes that named it gone all the same), and whether the
// subscription is still open.
func drainAddrUpdates(first netlink.AddrUpdate, updates <-chan netlink.AddrUpdate,
	watch netip.Addr) (v4, watched, open bool) {
	take := func(u netlink.AddrUpdate) {
		v4 = v4 || u.LinkAddress.IP.To4() != nil
		ip, ok := netip.AddrFromSlice(u.LinkAddress.IP)
		watched = watched || ok && ip.Unmap() == watch
	}
	take(first)
	for {
		select {
		case u, ok := <-updates:
			if !ok {
				return v4, watched, false
			}
			take(u)
		default:
			return v4, watched, true
		}
	}
}

// sync writes the node's current addresses; a failure is the loop's error and the
// map keeps what it held (addresses gone stay exempt until the next sync). While
// the loop has no subscription, that is its error too. After the first list it
// calls changed when the node IP came or went since the last list, or nodeIPNamed
// says a message of the burst named it (removed and added again since the last
// list), whether or not the map write worked (the kick is for the tunnel routes);
// when the list fails, the burst's mark waits for the next list.
func (l *hostAddrLoop) sync(nodeIPNamed bool) {
	l.kick = l.kick || nodeIPNamed
	addrs, err := l.list()
	if err == nil {
		err = l.set(addrs)
		toggled := slices.Contains(addrs, l.nodeIP) != slices.Contains(l.listed, l.nodeIP)
		if l.synced && (toggled || l.kick) && l.changed != nil {
			l.changed()
		}
		l.synced, l.kick, l.listed = true, false, addrs
	}
	l.loops.report("host-addresses", errors.Join(err, l.subErr))
	if err != nil {
		l.log.Error("write the node's addresses for NetworkPolicy's host exemption", "err", err)
		return
	}
	if !slices.Equal(addrs, l.last) {
		l.log.Info("node addresses exempt from NetworkPolicy (the host's own traffic into pods)", "addresses", addrs)
		l.last = addrs
	}
}
