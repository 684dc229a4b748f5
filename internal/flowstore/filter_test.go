package flowstore

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/flow"
)

// maxFilterRequest is a request at flow's filter limits that selects the TCP flows:
// MaxFilterValues values, MaxFilterBytes of text nearly, every pod value a blacklist
// entry each flow is matched against in vain.
func maxFilterRequest(t testing.TB) flow.Request {
	pods := make([]string, flow.MaxFilterValues-3) // the two filters and "tcp" count too
	size := (flow.MaxFilterBytes - len("tcp")) / len(pods)
	for i := range pods {
		p := fmt.Sprintf("ns-%03d/pod-", i)
		pods[i] = p + strings.Repeat("x", size-len(p))
	}
	req := flow.Request{
		Whitelist: []flow.Filter{{Protocol: []string{"tcp"}}},
		Blacklist: []flow.Filter{{SourcePod: pods}},
	}
	if err := req.Validate(); err != nil {
		t.Fatalf("the largest request allowed is refused: %v", err)
	}
	return req
}

// fullStore is a full store of DefaultCapacity flows, ports 0 to DefaultCapacity-1,
// the even ones TCP, the odd ones UDP.
func fullStore() *Store {
	s := New(DefaultCapacity)
	for i := range DefaultCapacity {
		s.Add(mkFlow(i, []string{"TCP", "UDP"}[i%2]))
	}
	return s
}

// evenPorts are the even numbers from lo to hi.
func evenPorts(lo, hi int) []uint16 {
	var p []uint16
	for i := lo; i <= hi; i += 2 {
		p = append(p, uint16(i))
	}
	return p
}

// A reader's filters run without the store's lock: an Add from another goroutine (the
// agent's Feed) while a request with the largest filters allowed reads a full store
// completes, and the reader gets the flows stored when it asked that are still in
// the ring, oldest first, none of those added since. With the filters run under the
// lock, the first Add waits for the whole read and the read for the Add: a deadlock.
func TestStoreAddDuringFilteredRead(t *testing.T) {
	s := fullStore()
	added := 0
	s.chunkCopied = func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Add(mkFlow(5000+added, "TCP"))
		}()
		<-done
		added++
	}
	got := ports(collect(t, s, maxFilterRequest(t)))
	s.chunkCopied = nil
	// 16 chunks of 256 (the last short), each followed by an Add that pushed the
	// oldest stored flow out: flows 0 to 14 left the ring before their chunk was read.
	chunks := (DefaultCapacity + historyChunk - 1) / historyChunk
	if added != chunks {
		t.Errorf("%d adds during the read, want one per chunk, %d", added, chunks)
	}
	if want := evenPorts(chunks, DefaultCapacity-1); !slices.Equal(got, want) {
		t.Errorf("read %d flows %v…, want the %d TCP flows from %d to %d in order", len(got), got[:min(len(got), 5)], len(want), want[0], want[len(want)-1])
	}
	if newest := ports(collect(t, s, flow.Request{Last: added})); !slices.Equal(newest, []uint16{5000, 5001, 5002, 5003, 5004, 5005, 5006, 5007, 5008, 5009, 5010, 5011, 5012, 5013, 5014, 5015}) {
		t.Errorf("the store's newest flows are %v, want the %d added during the read in order", newest, added)
	}
}

// A follow request with the largest filters gets the stored part, then the flow added
// while it was matched, once and in order.
func TestStoreFollowAddDuringFilteredRead(t *testing.T) {
	s := fullStore()
	req := maxFilterRequest(t)
	req.Last, req.Follow = 10, true
	s.chunkCopied = func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Add(mkFlow(5000, "TCP"))
			s.Add(mkFlow(5001, "UDP")) // not selected
		}()
		<-done
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan *flow.Flow, 100)
	go func() { _ = s.Flows(ctx, req, out) }()
	var got []uint16
	for len(got) < 11 {
		got = append(got, (<-out).SrcPort)
	}
	if want := append(evenPorts(DefaultCapacity-19, DefaultCapacity-1), 5000); !slices.Equal(got, want) {
		t.Errorf("followed %v, want the newest 10 TCP flows stored, then 5000", got)
	}
}

// A request beyond flow's filter limits is refused by the store too, whatever built it.
func TestStoreRefusesOversizedFilters(t *testing.T) {
	s := fullStore()
	req := maxFilterRequest(t)
	req.Blacklist[0].SourcePod = append(req.Blacklist[0].SourcePod, "x/")
	err := s.Flows(context.Background(), req, make(chan *flow.Flow, 1))
	if !errors.Is(err, flow.ErrInvalidFilter) || !strings.Contains(err.Error(), "at most") {
		t.Errorf("Flows with %d filter values: err %v, want one naming the limit", flow.MaxFilterValues+1, err)
	}
}

// BenchmarkFilteredRead is a read of a full store with the largest filters allowed:
// what a reader's filters cost, outside the lock.
func BenchmarkFilteredRead(b *testing.B) {
	s := fullStore()
	req := maxFilterRequest(b)
	out := make(chan *flow.Flow, DefaultCapacity)
	for b.Loop() {
		if err := s.Flows(context.Background(), req, out); err != nil {
			b.Fatal(err)
		}
		for len(out) > 0 {
			<-out
		}
	}
}

// BenchmarkCopyChunk is the longest a reader holds the store's lock: one chunk copied.
func BenchmarkCopyChunk(b *testing.B) {
	s := fullStore()
	chunk := make([]flow.Record, 0, historyChunk)
	for b.Loop() {
		chunk, _ = s.copyStored(chunk[:0], s.added)
	}
}

// BenchmarkBatchToMaxFilterFollowers is a Feed batch (feedBatch flows) added with
// MaxFollowers followers, each with the largest filters allowed: the most the
// followers' filters can add to the adding goroutine's work per batch. The flows'
// source pods are in ns-007, a namespace the filters name (spread: 253 namespaces,
// one value each) or the only one they name (one-namespace: 253 name prefixes there,
// none the pods'), so every value of that namespace is compared. many-filters is
// the most filters allowed, their values IPs (ipFiltersRequest): every filter of
// both lists is tried on every flow.
func BenchmarkBatchToMaxFilterFollowers(b *testing.B) {
	for _, c := range []struct {
		name string
		req  func(testing.TB) flow.Request
	}{
		{"spread", maxFilterRequest},
		{"one-namespace", oneNamespaceRequest},
		{"many-filters", ipFiltersRequest},
	} {
		b.Run(c.name, func(b *testing.B) {
			benchmarkFollowers(b, c.req(b))
		})
	}
}

// oneNamespaceRequest is maxFilterRequest with every pod value in ns-007.
func oneNamespaceRequest(t testing.TB) flow.Request {
	req := maxFilterRequest(t)
	for i, p := range req.Blacklist[0].SourcePod {
		_, name, _ := strings.Cut(p, "/")
		req.Blacklist[0].SourcePod[i] = "ns-007/" + name[:len(name)-len("ns-007")]
	}
	return req
}

// ipFiltersRequest is a request at flow's limits of filters and values, made of IP
// filters: flow.MaxFilters whitelist filters of destination IPs, the flows' matched
// by the last value of the last one, and as many blacklist filters of source IPs
// none of the flows has, so that every value of every filter is compared.
func ipFiltersRequest(t testing.TB) flow.Request {
	const lists = 2
	perFilter := (flow.MaxFilterValues - lists*flow.MaxFilters) / (lists * flow.MaxFilters)
	var req flow.Request
	for i := range flow.MaxFilters {
		var wl, bl flow.Filter
		for j := range perFilter {
			wl.DestinationIP = append(wl.DestinationIP, netip.MustParsePrefix(fmt.Sprintf("10.1.%d.%d/32", i, j)))
			bl.SourceIP = append(bl.SourceIP, netip.MustParsePrefix(fmt.Sprintf("10.2.%d.%d/32", i, j)))
		}
		req.Whitelist, req.Blacklist = append(req.Whitelist, wl), append(req.Blacklist, bl)
	}
	last := &req.Whitelist[flow.MaxFilters-1]
	last.DestinationIP[perFilter-1] = netip.MustParsePrefix("10.244.0.0/16")
	if err := req.Validate(); err != nil {
		t.Fatalf("the largest request allowed is refused: %v", err)
	}
	return req
}

// benchmarkFollowers adds batches of feedBatch TCP flows from pods of ns-007 in
// 10.244.0.0/16 with MaxFollowers followers of req.
func benchmarkFollowers(b *testing.B, req flow.Request) {
	s := New(DefaultCapacity)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req.Follow = true
	for range MaxFollowers {
		out := make(chan *flow.Flow)
		go func() { _ = s.Flows(ctx, req, out) }()
		go func() {
			for range out {
			}
		}()
	}
	for s.Stats().Followers != MaxFollowers {
		runtime.Gosched()
	}
	batch := make([]flow.Flow, feedBatch)
	for i := range batch {
		batch[i] = *mkFlow(i, "TCP")
		batch[i].Source = flow.Endpoint{Namespace: "ns-007", Pod: fmt.Sprintf("client-%d", i), IP: fmt.Sprintf("10.244.1.%d", i)}
		batch[i].Destination = flow.Endpoint{IP: fmt.Sprintf("10.244.2.%d", i)}
	}
	b.ReportAllocs()
	for b.Loop() {
		s.AddBatch(batch)
	}
}

// A node serves its stored flows to at most MaxHistoryReaders requests at once (each
// holds copies until its client reads them): one more is refused with
// ErrTooManyReaders; a follow request without --last reads no history and is not
// counted; a slot comes back when a reader's client goes away.
func TestStoreBoundsHistoryReaders(t *testing.T) {
	s := fullStore()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, cancelFirst := context.WithCancel(ctx)
	for i := range MaxHistoryReaders {
		c := ctx
		if i == 0 {
			c = first
		}
		go func() { _ = s.Flows(c, flow.Request{}, make(chan *flow.Flow)) }() // never read
	}
	waitReaders(t, s, MaxHistoryReaders)
	if err := s.Flows(ctx, flow.Request{Last: 1}, make(chan *flow.Flow, 1)); !errors.Is(err, ErrTooManyReaders) {
		t.Fatalf("reader %d: %v, want ErrTooManyReaders", MaxHistoryReaders+1, err)
	}
	// The node's own sockets (root's myelin observe) still read: LocalHistoryReaders
	// slots are theirs, and no more.
	local := Local(ctx)
	for i := range LocalHistoryReaders {
		go func() { _ = s.Flows(local, flow.Request{}, make(chan *flow.Flow)) }() // never read
		waitReaders(t, s, MaxHistoryReaders+i+1)
	}
	if err := s.Flows(local, flow.Request{Last: 1}, make(chan *flow.Flow, 1)); !errors.Is(err, ErrTooManyReaders) ||
		!strings.Contains(err.Error(), "to its own sockets") {
		t.Fatalf("local reader %d: %v, want ErrTooManyReaders naming the local slots", LocalHistoryReaders+1, err)
	}
	followCtx, stopFollow := context.WithCancel(ctx)
	stopFollow()
	if err := s.Flows(followCtx, flow.Request{Follow: true}, make(chan *flow.Flow)); err != nil {
		t.Errorf("a follow request without --last: %v, want admitted", err)
	}
	cancelFirst()
	for {
		err := s.Flows(ctx, flow.Request{Last: 1}, make(chan *flow.Flow, 1))
		if err == nil {
			return
		}
		if !errors.Is(err, ErrTooManyReaders) {
			t.Fatalf("after a reader went away: %v", err)
		}
		runtime.Gosched()
	}
}

// waitReaders waits until s has n readers of stored flows.
func waitReaders(t *testing.T, s *Store, n int) {
	t.Helper()
	for {
		s.mu.Lock()
		got := s.historyReaders
		s.mu.Unlock()
		if got == n {
			return
		}
		runtime.Gosched()
	}
}
