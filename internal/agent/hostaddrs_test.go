package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// fakeHost is the node's addresses and its netlink subscriptions, for the
// host-addresses loop.
type fakeHost struct {
	mu      sync.Mutex
	addrs   []netip.Addr
	lists   int
	listErr error
	subErr  error
	subs    []chan<- netlink.AddrUpdate
	onErr   func(error)
	written chan []netip.Addr
}

func newFakeHost(a ...string) *fakeHost {
	return &fakeHost{addrs: addrs(a...), written: make(chan []netip.Addr, 1000)}
}

func (f *fakeHost) loop(every, retry time.Duration) (*hostAddrLoop, *loops) {
	lp := newLoops()
	return &hostAddrLoop{list: f.list, subscribe: f.subscribe, set: f.set, every: every, retry: retry, loops: lp,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}, lp
}

func (f *fakeHost) list() ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	return slices.Clone(f.addrs), f.listErr
}

func (f *fakeHost) subscribe(ch chan<- netlink.AddrUpdate, _ <-chan struct{}, onErr func(error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subErr != nil {
		return f.subErr
	}
	f.subs, f.onErr = append(f.subs, ch), onErr
	return nil
}

func (f *fakeHost) set(a []netip.Addr) error {
	f.written <- a
	return nil
}

// change sets the node's addresses and sends the newest subscription a message
// about ip.
func (f *fakeHost) change(to []netip.Addr, ip string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addrs = to
	f.subs[len(f.subs)-1] <- netlink.AddrUpdate{LinkAddress: net.IPNet{IP: net.ParseIP(ip)}}
}

// end closes the newest subscription as netlink does when its socket fails.
func (f *fakeHost) end(to []netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addrs = to
	f.onErr(errors.New("Receive failed: no buffer space available"))
	close(f.subs[len(f.subs)-1])
}

func (f *fakeHost) counts() (lists, subs int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists, len(f.subs)
}

func (f *fakeHost) next(t *testing.T, step string) []netip.Addr {
	t.Helper()
	select {
	case got := <-f.written:
		return got
	case <-time.After(time.Minute):
		t.Fatalf("%s: nothing written", step)
		return nil
	}
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(s))
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// The loop writes the node's addresses at start and after an address message;
// no tick in this test.
func TestHostAddrLoopFollowsChanges(t *testing.T) {
	f := newFakeHost("192.168.0.11", "192.0.2.77")
	l, _ := f.loop(time.Hour, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)

	if got := f.next(t, "start"); !slices.Equal(got, addrs("192.168.0.11", "192.0.2.77")) {
		t.Fatalf("start: wrote %v", got)
	}
	f.change(addrs("192.168.0.11"), "192.0.2.77")
	if got := f.next(t, "an address removed"); !slices.Equal(got, addrs("192.168.0.11")) {
		t.Fatalf("an address removed: wrote %v", got)
	}
}

// A sync that finds the node IP come or go tells the node loops (changed);
// other addresses and unchanged syncs do not.
func TestHostAddrLoopTellsNodeIPChanges(t *testing.T) {
	f := newFakeHost("192.168.0.11", "192.0.2.77")
	l, _ := f.loop(time.Hour, time.Hour)
	l.nodeIP = netip.MustParseAddr("192.0.2.77")
	events := make(chan string, 100)
	set := l.set
	var fail atomic.Bool
	l.set = func(a []netip.Addr) error {
		events <- "set"
		if err := set(a); err != nil || !fail.Load() {
			return err
		}
		return errors.New("map full")
	}
	l.changed = func() { events <- "changed" }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)

	f.next(t, "start") // the Node loops' own first syncs need no kick
	for _, step := range []struct {
		name string
		to   []netip.Addr
		ip   string
		fail bool // the map write fails
	}{
		{"a message, nothing changed", addrs("192.168.0.11", "192.0.2.77"), "192.168.0.11", false},
		{"the node IP removed", addrs("192.168.0.11"), "192.0.2.77", false},
		{"another address added", addrs("192.168.0.11", "198.51.100.9"), "198.51.100.9", false},
		{"the node IP back", addrs("192.168.0.11", "198.51.100.9", "192.0.2.77"), "192.0.2.77", false},
		// Removed and added again before the list: the list is as it was.
		{"the node IP gone and back", addrs("192.168.0.11", "198.51.100.9", "192.0.2.77"), "192.0.2.77", false},
		// The same, the write failing: the kick is for the tunnel routes, not the map.
		{"the node IP gone and back, the write failing", addrs("192.168.0.11", "198.51.100.9", "192.0.2.77"),
			"192.0.2.77", true},
		{"the node IP removed, the write failing", addrs("192.168.0.11", "198.51.100.9"), "192.0.2.77", true},
		{"a message after the kicks", addrs("192.168.0.11", "198.51.100.9"), "198.51.100.9", false},
	} {
		fail.Store(step.fail)
		f.change(step.to, step.ip)
		f.next(t, step.name)
	}
	want := []string{"set", "set", "set", "changed", "set", "set", "changed", "set", "changed",
		"set", "changed", "set", "changed", "set"}
	var got []string
	for len(got) < len(want) {
		select {
		case e := <-events:
			got = append(got, e)
		case <-time.After(time.Minute):
			t.Fatalf("events %v, want %v", got, want)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

// A burst of messages is one sync, and only IPv4 addresses call for one.
func TestDrainAddrUpdates(t *testing.T) {
	msg := func(ip string) netlink.AddrUpdate {
		return netlink.AddrUpdate{LinkAddress: net.IPNet{IP: net.ParseIP(ip)}}
	}
	queued := func(closed bool, ips ...string) chan netlink.AddrUpdate {
		ch := make(chan netlink.AddrUpdate, len(ips))
		for _, ip := range ips {
			ch <- msg(ip)
		}
		if closed {
			close(ch)
		}
		return ch
	}
	nodeIP := netip.MustParseAddr("192.0.2.10")
	for _, c := range []struct {
		name                  string
		first                 string
		ch                    chan netlink.AddrUpdate
		v4, nodeIPNamed, open bool
		leftQueued            int
	}{
		{"IPv6 alone", "fd00::1", queued(false), false, false, true, 0},
		{"IPv6 twice", "fd00::1", queued(false, "fd00::2"), false, false, true, 0},
		{"IPv6 then IPv4 queued", "fd00::1", queued(false, "fd00::2", "192.0.2.77"), true, false, true, 0},
		{"IPv4 first", "192.0.2.77", queued(false, "fd00::2"), true, false, true, 0},
		{"the node IP queued (gone, back)", "192.0.2.77", queued(false, "192.0.2.10", "192.0.2.10"), true, true, true, 0},
		{"the node IP first", "192.0.2.10", queued(false), true, true, true, 0},
		{"the subscription ended", "192.0.2.77", queued(true, "fd00::2"), true, false, false, 0},
	} {
		v4, named, open := drainAddrUpdates(msg(c.first), c.ch, nodeIP)
		if v4 != c.v4 || named != c.nodeIPNamed || open != c.open || len(c.ch) != c.leftQueued {
			t.Errorf("%s: v4=%v nodeIPNamed=%v open=%v %d left, want %v %v %v %d", c.name, v4, named, open, len(c.ch),
				c.v4, c.nodeIPNamed, c.open, c.leftQueued)
		}
	}
}

// A subscription that ends (its socket's buffer overran) is made again at once,
// and what changed meanwhile is written; the loop's status shows it ended.
func TestHostAddrLoopResubscribes(t *testing.T) {
	f := newFakeHost("192.168.0.11")
	l, lp := f.loop(time.Hour, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)
	f.next(t, "start")
	f.end(addrs("192.168.0.11", "198.51.100.1"))
	if got := f.next(t, "after the subscription ended"); !slices.Equal(got, addrs("192.168.0.11", "198.51.100.1")) {
		t.Fatalf("after the subscription ended: wrote %v", got)
	}
	if _, subs := f.counts(); subs != 2 {
		t.Errorf("%d subscriptions, want 2", subs)
	}
	st := lp.snapshot()
	if len(st) != 1 || !strings.Contains(st[0].LastError, "no buffer space") {
		t.Errorf("loop status %+v, want the subscription's end as its last error", st)
	}
}

// A subscription that can't be made is the loop's error at each sync (its
// status stays failing), and the loop lists again at each try (every resync period); a failed
// list is an error and writes nothing.
func TestHostAddrLoopErrors(t *testing.T) {
	f := newFakeHost("192.168.0.11")
	f.subErr = errors.New("netlink: no socket")
	l, lp := f.loop(time.Millisecond, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)
	for i := range 3 { // listed again although no subscription works
		if got := f.next(t, "write"); !slices.Equal(got, addrs("192.168.0.11")) {
			t.Fatalf("write %d: %v", i, got)
		}
	}
	cancel()
	ctrl := lp.controllers()
	st := lp.snapshot()
	if len(st) != 1 || !strings.Contains(st[0].LastError, "no socket") || len(ctrl) != 1 || !ctrl[0].Failing {
		t.Fatalf("loop status %+v %+v, want host-addresses failing with the subscription's error", st, ctrl)
	}

	f2 := newFakeHost()
	f2.listErr = errors.New("dump interrupted")
	l2, lp2 := f2.loop(time.Hour, time.Hour)
	l2.sync(false)
	if st := lp2.snapshot(); len(st) != 1 || st[0].LastError != "dump interrupted" {
		t.Errorf("after a failed list: loop status %+v, want its error", st)
	}
	if len(f2.written) != 0 {
		t.Errorf("a failed list wrote the map")
	}
}
