package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// fakeHost is the node's addresses and its netlink subscriptions, for the
// host-addresses loop.
type fakeHost struct {
	mu      sync.Mutex
	addrs   []netip.Addr
	listErr error
	subErr  error
	subs    []chan<- netlink.AddrUpdate
	written chan []netip.Addr
}

func (f *fakeHost) list() ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.addrs), f.listErr
}

func (f *fakeHost) subscribe(ch chan<- netlink.AddrUpdate, _ <-chan struct{}) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subErr != nil {
		return f.subErr
	}
	f.subs = append(f.subs, ch)
	return nil
}

func (f *fakeHost) set(a []netip.Addr) error {
	f.written <- a
	return nil
}

// change sets the node's addresses and tells the newest subscription; end
// closes it as netlink does when its socket fails.
func (f *fakeHost) change(addrs []netip.Addr, end bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addrs = addrs
	ch := f.subs[len(f.subs)-1]
	if end {
		close(ch)
		return
	}
	ch <- netlink.AddrUpdate{}
}

func (f *fakeHost) subscriptions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(s))
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// The loop writes the node's addresses (sorted, once each) at start and after
// each change netlink reports; a subscription that ends is made again.
func TestHostAddrLoopFollowsChanges(t *testing.T) {
	f := &fakeHost{addrs: addrs("192.168.0.11", "192.0.2.77", "192.168.0.11"), written: make(chan []netip.Addr)}
	l := &hostAddrLoop{list: f.list, subscribe: f.subscribe, set: f.set, every: time.Hour, loops: newLoops(),
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)

	next := func(step string, want []netip.Addr) {
		t.Helper()
		select {
		case got := <-f.written:
			if !slices.Equal(got, want) {
				t.Fatalf("%s: wrote %v, want %v", step, got, want)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: nothing written", step)
		}
	}
	next("start", addrs("192.0.2.77", "192.168.0.11"))
	f.change(addrs("192.168.0.11"), false)
	next("an address removed", addrs("192.168.0.11"))

}

// A subscription that ends (its socket failed) is made again at the next tick,
// and what changed meanwhile is written.
func TestHostAddrLoopResubscribes(t *testing.T) {
	f := &fakeHost{addrs: addrs("192.168.0.11"), written: make(chan []netip.Addr)}
	l := &hostAddrLoop{list: f.list, subscribe: f.subscribe, set: f.set, every: time.Millisecond, loops: newLoops(),
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)
	<-f.written
	f.change(addrs("192.168.0.11", "198.51.100.1"), true)
	for got := range f.written {
		if slices.Equal(got, addrs("192.168.0.11", "198.51.100.1")) && f.subscriptions() == 2 {
			return
		}
		if n := f.subscriptions(); n > 2 {
			t.Fatalf("%d subscriptions after one ended, want 2", n)
		}
	}
}

// A failed subscription or list is the loop's error; the loop goes on listing
// on its tick.
func TestHostAddrLoopErrors(t *testing.T) {
	f := &fakeHost{addrs: addrs("192.168.0.11"), subErr: errors.New("netlink: no socket"), written: make(chan []netip.Addr)}
	lp := newLoops()
	l := &hostAddrLoop{list: f.list, subscribe: f.subscribe, set: f.set, every: time.Millisecond, loops: lp,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)
	for i := range 3 { // listed again although no subscription works
		select {
		case got := <-f.written:
			if !slices.Equal(got, addrs("192.168.0.11")) {
				t.Fatalf("write %d: %v", i, got)
			}
		case <-time.After(time.Minute):
			t.Fatalf("write %d: nothing written", i)
		}
	}
	cancel()
	st := lp.snapshot()
	if len(st) != 1 || st[0].Name != "host-addresses" || st[0].LastError == "" {
		t.Fatalf("loop status %+v, want host-addresses with the subscription's error", st)
	}

	f2 := &fakeHost{listErr: errors.New("dump interrupted"), written: make(chan []netip.Addr, 1)}
	lp2 := newLoops()
	l2 := &hostAddrLoop{list: f2.list, set: f2.set, loops: lp2, log: l.log}
	l2.sync()
	if st := lp2.snapshot(); len(st) != 1 || st[0].LastError != "dump interrupted" {
		t.Errorf("after a failed list: loop status %+v, want its error", st)
	}
	if len(f2.written) != 0 {
		t.Errorf("a failed list wrote the map")
	}
}
