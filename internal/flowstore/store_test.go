package flowstore

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/flow"
)

func mkFlow(i int, proto string) *flow.Flow {
	return &flow.Flow{Time: time.Unix(int64(i), 0), Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: proto, SrcPort: uint16(i)}
}

// collect reads req from s until Flows returns.
func collect(t *testing.T, s *Store, req flow.Request) []*flow.Flow {
	t.Helper()
	out := make(chan *flow.Flow, 100000)
	if err := s.Flows(context.Background(), req, out); err != nil {
		t.Fatal(err)
	}
	close(out)
	var got []*flow.Flow
	for f := range out {
		got = append(got, f)
	}
	return got
}

func ports(fs []*flow.Flow) []uint16 {
	var p []uint16
	for _, f := range fs {
		p = append(p, f.SrcPort)
	}
	return p
}

func TestStoreKeepsNewestUpToCapacity(t *testing.T) {
	s := New(3)
	for i := 1; i <= 5; i++ {
		s.Add(mkFlow(i, "TCP"))
	}
	if got := ports(collect(t, s, flow.Request{})); len(got) != 3 || got[0] != 3 || got[2] != 5 {
		t.Errorf("stored = %v, want [3 4 5]", got)
	}
	if st := s.Stats(); st.Stored != 3 || st.Added != 5 || st.Capacity != 3 {
		t.Errorf("Stats = %+v", st)
	}
	if got := ports(collect(t, s, flow.Request{Last: 2})); len(got) != 2 || got[0] != 4 || got[1] != 5 {
		t.Errorf("Last 2 = %v, want [4 5]", got)
	}
}

func TestStoreLastCountsMatchingFlows(t *testing.T) {
	s := New(10)
	for i := 1; i <= 6; i++ {
		proto := "TCP"
		if i%2 == 0 {
			proto = "UDP"
		}
		s.Add(mkFlow(i, proto))
	}
	req := flow.Request{Last: 2, Whitelist: []flow.Filter{{Protocol: []string{"udp"}}}}
	if got := ports(collect(t, s, req)); len(got) != 2 || got[0] != 4 || got[1] != 6 {
		t.Errorf("last 2 UDP = %v, want [4 6]", got)
	}
	if got := ports(collect(t, s, flow.Request{Since: time.Unix(5, 0)})); len(got) != 2 || got[0] != 5 {
		t.Errorf("since 5 = %v, want [5 6]", got)
	}
}

type countSink struct{ n int }

func (c *countSink) Observe(rs []flow.Record) { c.n += len(rs) }

func TestStoreSinksSeeEveryFlow(t *testing.T) {
	s := New(2)
	c := &countSink{}
	s.AddSink(c)
	for i := 0; i < 5; i++ {
		s.Add(mkFlow(i, "TCP"))
	}
	if c.n != 5 {
		t.Errorf("sink saw %d flows, want 5", c.n)
	}
}

func TestStoreFollowStoredThenNew(t *testing.T) {
	s := New(10)
	s.Add(mkFlow(1, "TCP"))
	s.Add(mkFlow(2, "TCP"))
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan *flow.Flow)
	done := make(chan error, 1)
	go func() { done <- s.Flows(ctx, flow.Request{Follow: true, Last: 1}, out) }()
	if f := <-out; f.SrcPort != 2 {
		t.Fatalf("first = %d, want the last stored (2)", f.SrcPort)
	}
	waitFollowers(t, s, 1)
	s.Add(mkFlow(3, "TCP"))
	if f := <-out; f.SrcPort != 3 {
		t.Fatalf("followed = %d, want 3", f.SrcPort)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("follow ended with %v, want nil", err)
	}
	waitFollowers(t, s, 0)
}

// Followers with and without IP filters side by side: the store parses a flow's
// addresses for the one that has them, and each gets what its request selects.
func TestStoreFollowIPFilters(t *testing.T) {
	s := New(10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	byIP, all := make(chan *flow.Flow, 10), make(chan *flow.Flow, 10)
	go func() {
		_ = s.Flows(ctx, flow.Request{Follow: true, Whitelist: []flow.Filter{{SourceIP: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}}}}, byIP)
	}()
	go func() { _ = s.Flows(ctx, flow.Request{Follow: true}, all) }()
	waitFollowers(t, s, 2)
	for i, ip := range []string{"10.244.2.5", "10.244.1.5"} {
		f := mkFlow(i+1, "TCP")
		f.Source.IP = ip
		s.Add(f)
	}
	for _, want := range []string{"10.244.2.5", "10.244.1.5"} {
		if f := <-all; f.Source.IP != want {
			t.Errorf("the follower without filters got a flow from %s, want %s (every flow, in order)", f.Source.IP, want)
		}
	}
	select { // each follower delivers from its own goroutine
	case f := <-byIP:
		if f.Source.IP != "10.244.1.5" {
			t.Errorf("the IP filter's follower got a flow from %s, want only 10.244.1.5's", f.Source.IP)
		}
	case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("the IP filter's follower got no flow, want 10.244.1.5's")
	}
}

// A follower that does not read loses flows beyond its buffer and is told how many.
func TestStoreSlowFollowerGetsLost(t *testing.T) {
	s := New(10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan *flow.Flow)
	go func() { _ = s.Flows(ctx, flow.Request{Follow: true}, out) }()
	waitFollowers(t, s, 1)
	total := followBuffer + 500
	for i := 0; i < total; i++ {
		s.Add(mkFlow(i, "TCP"))
	}
	var got, lost uint64
	for got+lost < uint64(total) {
		f := <-out
		if f.Type == flow.TypeLost {
			lost += f.Lost
			continue
		}
		got++
	}
	if got > followBuffer+1 || lost == 0 || got+lost != uint64(total) {
		t.Errorf("delivered %d, lost %d of %d; want at most %d delivered and the rest counted lost", got, lost, total, followBuffer+1)
	}
}

// waitFollowers waits until s has n followers: their goroutines register when the
// scheduler runs them, which a loaded machine (-race, parallel packages) may delay by
// seconds, so only a hang reaches the bound.
func waitFollowers(t *testing.T, s *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); s.Stats().Followers != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("followers = %d after 30s, want %d", s.Stats().Followers, n)
		}
	}
}

// Flows lost after a follower's last queued flow are reported even when no flow
// follows them (on the lostReport timer).
func TestFollowerReportsLostWithoutNextFlow(t *testing.T) {
	fo := &follower{ch: make(chan *flow.Flow), lostReport: 10 * time.Millisecond}
	fo.offer(&flow.Flow{Node: "n1", Type: flow.TypeL3L4}) // nobody reads ch: lost
	fo.offer(&flow.Flow{Node: "n1", Type: flow.TypeL3L4})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan *flow.Flow)
	go func() { _ = fo.run(ctx, out) }()
	select {
	case f := <-out:
		if f.Type != flow.TypeLost || f.Lost != 2 || f.Node != "n1" {
			t.Errorf("got %+v, want a TypeLost record of 2 flows on n1", f)
		}
	case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("no lost record without a following flow")
	}
}

// A node serves at most MaxFollowers follow streams, and LocalFollowers more to its
// own sockets; one more gets an error naming the limit.
func TestStoreCapsFollowers(t *testing.T) {
	s := New(10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < MaxFollowers; i++ {
		go func() { _ = s.Flows(ctx, flow.Request{Follow: true}, make(chan *flow.Flow)) }()
	}
	waitFollowers(t, s, MaxFollowers)
	err := s.Flows(ctx, flow.Request{Follow: true}, make(chan *flow.Flow))
	if !errors.Is(err, ErrTooManyFollowers) || !strings.Contains(err.Error(), strconv.Itoa(MaxFollowers)) {
		t.Errorf("follower %d: err = %v, want ErrTooManyFollowers naming %d", MaxFollowers+1, err, MaxFollowers)
	}
	if err := s.Flows(ctx, flow.Request{Last: 1}, make(chan *flow.Flow, 1)); err != nil {
		t.Errorf("a non-follow read with %d followers: %v", MaxFollowers, err)
	}

	// The node's own sockets have LocalFollowers more, which network streams can't
	// take, and a local stream that ends gives its slot back.
	local := Local(ctx)
	localCtx, endLocal := context.WithCancel(local)
	done := make(chan error, 1)
	go func() { done <- s.Flows(localCtx, flow.Request{Follow: true}, make(chan *flow.Flow)) }()
	for i := 1; i < LocalFollowers; i++ {
		go func() { _ = s.Flows(local, flow.Request{Follow: true}, make(chan *flow.Flow)) }()
	}
	waitFollowers(t, s, MaxFollowers+LocalFollowers)
	err = s.Flows(local, flow.Request{Follow: true}, make(chan *flow.Flow))
	if !errors.Is(err, ErrTooManyFollowers) || !strings.Contains(err.Error(), strconv.Itoa(MaxFollowers+LocalFollowers)) {
		t.Errorf("local follower %d: err = %v, want ErrTooManyFollowers naming %d", LocalFollowers+1, err, MaxFollowers+LocalFollowers)
	}
	endLocal()
	<-done
	waitFollowers(t, s, MaxFollowers+LocalFollowers-1)
	if err := s.Flows(ctx, flow.Request{Follow: true}, make(chan *flow.Flow)); !errors.Is(err, ErrTooManyFollowers) {
		t.Errorf("a network follower in a local one's freed slot: err = %v, want ErrTooManyFollowers", err)
	}
	go func() { _ = s.Flows(local, flow.Request{Follow: true}, make(chan *flow.Flow)) }()
	waitFollowers(t, s, MaxFollowers+LocalFollowers)
}

// Local streams (the node's sockets: root's CLI, `myelin ui` reading the node) use the
// shared slots too, and network ones never the LocalFollowers slots kept for them.
func TestStoreLocalFollowersShareThePool(t *testing.T) {
	s := New(10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	local := Local(ctx)
	for range LocalFollowers + 4 { // more than the reserve, no network stream open
		go func() { _ = s.Flows(local, flow.Request{Follow: true}, make(chan *flow.Flow)) }()
	}
	waitFollowers(t, s, LocalFollowers+4)
	for range MaxFollowers - 4 {
		go func() { _ = s.Flows(ctx, flow.Request{Follow: true}, make(chan *flow.Flow)) }()
	}
	waitFollowers(t, s, MaxFollowers+LocalFollowers)
	for name, c := range map[string]context.Context{"network": ctx, "local": local} {
		if err := s.Flows(c, flow.Request{Follow: true}, make(chan *flow.Flow)); !errors.Is(err, ErrTooManyFollowers) {
			t.Errorf("a %s follower with every slot taken: err = %v, want ErrTooManyFollowers", name, err)
		}
	}
}

// Concurrent adders and followers: every follower sees every flow once, in the order
// the store kept them (filters run outside the store's lock).
func TestStoreConcurrentAddKeepsFollowOrder(t *testing.T) {
	s := New(100)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan *flow.Flow, 4*followBuffer)
	go func() { _ = s.Flows(ctx, flow.Request{Follow: true}, out) }()
	waitFollowers(t, s, 1)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				s.Add(mkFlow(g*1000+i, "TCP"))
				_ = s.Stats()
			}
		}()
	}
	wg.Wait()
	stored := collect(t, s, flow.Request{Last: 100})
	var got []*flow.Flow
	for len(got) < 800 {
		got = append(got, <-out)
	}
	if !slices.Equal(ports(got[700:]), ports(stored)) {
		t.Errorf("follower's last 100 flows %v differ from the store's %v", ports(got[700:]), ports(stored))
	}
}

// Add keeps a copy: the agent's Feed converts every record into one reused Flow, so
// neither stored flows nor followers' may change when the caller reuses it.
func TestStoreAddCopiesTheFlow(t *testing.T) {
	s := New(4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan *flow.Flow, 4)
	go func() { _ = s.Flows(ctx, flow.Request{Follow: true}, out) }()
	waitFollowers(t, s, 1)
	f := mkFlow(1, "TCP")
	s.Add(f)
	*f = *mkFlow(2, "UDP") // reused for the next record
	s.Add(f)
	f.SrcPort = 99
	if got := ports(collect(t, s, flow.Request{})); !slices.Equal(got, []uint16{1, 2}) {
		t.Errorf("stored = %v, want [1 2]", got)
	}
	first, second := <-out, <-out
	if first.SrcPort != 1 || first.Protocol != "TCP" || second.SrcPort != 2 || second.Protocol != "UDP" {
		t.Errorf("followed %d/%s then %d/%s, want 1/TCP then 2/UDP", first.SrcPort, first.Protocol, second.SrcPort, second.Protocol)
	}
}

// Slots an adder has reserved are not read while it writes them: when the ring is
// full they held its oldest flows, gone for readers from the reserve on; those the
// adder does not use come back at commit.
func TestStoreReservedSlotsHidden(t *testing.T) {
	s := New(4)
	for i := range 4 {
		s.Add(mkFlow(i, "TCP"))
	}
	dst := s.reserve(3) // the oldest three slots: flows 0, 1, 2
	if len(dst) != 3 {
		t.Fatalf("reserved %d slots, want 3", len(dst))
	}
	dst[0].SrcPort = 7777 // half written
	if got := ports(collect(t, s, flow.Request{})); fmt.Sprint(got) != "[3]" {
		t.Errorf("while reserved, readers see ports %v, want [3]", got)
	}
	if st := s.Stats(); st.Stored != 1 {
		t.Errorf("while reserved, Stats says %d stored, want 1", st.Stored)
	}
	dst[0] = flow.Whole(mkFlow(4, "TCP"))
	s.commit(1)
	if got := ports(collect(t, s, flow.Request{})); fmt.Sprint(got) != "[1 2 3 4]" {
		t.Errorf("after committing one, ports %v, want [1 2 3 4]", got)
	}
	// Not full: slots reserved and not used are not stored.
	s = New(4)
	s.Add(mkFlow(0, "TCP"))
	dst = s.reserve(3)
	dst[0] = flow.Whole(mkFlow(1, "TCP"))
	s.commit(1)
	if got := ports(collect(t, s, flow.Request{})); fmt.Sprint(got) != "[0 1]" {
		t.Errorf("not full, ports %v, want [0 1]", got)
	}
}
