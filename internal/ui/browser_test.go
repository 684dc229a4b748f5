package ui

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/ui/browsertest"
)

// waitLimit bounds each wait for the live page to show something.
const waitLimit = 30 * time.Second

func shopFlows() []*flow.Flow {
	toCart := func(ago time.Duration) *flow.Flow {
		f := tcp(ago, "shop/frontend", "shop/cart", 8080, flow.Forwarded)
		f.Service = "shop/cart"
		return f
	}
	reply := tcp(5*time.Second, "shop/cart", "shop/frontend", 40000, flow.Forwarded)
	reply.IsReply = true
	denied := tcp(4*time.Second, "shop/frontend", "db/postgres", 5432, flow.Dropped)
	denied.DropReason = "DROP_POLICY_DENIED"
	return []*flow.Flow{
		tcp(10*time.Minute, "old/job", "shop/cart", 8080, flow.Forwarded), // outside the 5 min window
		toCart(7 * time.Second), toCart(6 * time.Second), reply, denied,
		tcp(3*time.Second, "shop/cart", "203.0.113.10", 80, flow.Forwarded),
		{Time: time.Now().Add(-2 * time.Second), Node: "myelin-node-2", Type: flow.TypeLost, Lost: 3},
	}
}

func dumpOnFailure(t *testing.T, ctx context.Context) {
	t.Cleanup(func() {
		if t.Failed() {
			html, err := browsertest.Eval[string](ctx, `document.body.outerHTML`)
			t.Logf("the page when the test failed (err %v):\n%s", err, html)
		}
	})
}

func TestBrowserServiceMap(t *testing.T) {
	ctx := browsertest.Start(t)
	src := newFakeSource(shopFlows()...)
	srv := serve(t, src)
	dumpOnFailure(t, ctx)
	if err := browsertest.Open(ctx, srv.URL+"/"); err != nil {
		t.Fatal(err)
	}
	// The stored flows come as events, which the server may flush in more than one
	// write: the LOST record's row (the last stored flow) means every row is in, and
	// the last edge-drawing flow's edge that a draw saw every edge.
	if err := browsertest.WaitFor(ctx, `tr.flow.lost`, waitLimit); err != nil {
		t.Fatal(err)
	}
	if err := browsertest.WaitFor(ctx, `g.edge[data-edge="shop/cart->ip:203.0.113.10"]`, waitLimit); err != nil {
		t.Fatal(err)
	}
	assertSet(t, ctx, "g.namespace", "data-namespace", "", "db", "shop")
	assertSet(t, ctx, "g.node", "data-node",
		"db/postgres", "ip:203.0.113.10", "service:shop/cart", "shop/cart", "shop/frontend")
	assertSet(t, ctx, "g.edge", "data-edge",
		"service:shop/cart->shop/cart", "shop/cart->ip:203.0.113.10",
		"shop/frontend->db/postgres", "shop/frontend->service:shop/cart")
	assertSet(t, ctx, "g.edge.dropped", "data-edge", "shop/frontend->db/postgres")
	assertSet(t, ctx, `g.edge[data-edge="shop/frontend->service:shop/cart"]`, "data-flows", "2")
	color, err := browsertest.Eval[string](ctx,
		`getComputedStyle(document.querySelector('g.edge.dropped path')).stroke`)
	if err != nil || color != "rgb(210, 41, 30)" {
		t.Errorf("the dropped edge's stroke is %q (%v), want red rgb(210, 41, 30)", color, err)
	}
	// Every stored flow is a row, newest first, the drop marked.
	assertList(t, ctx, "tr.flow", "data-source",
		"", "shop/cart", "shop/frontend", "shop/cart", "shop/frontend", "shop/frontend", "old/job")
	assertList(t, ctx, "tr.flow.dropped", "data-destination", "db/postgres")
	assertList(t, ctx, "tr.flow.lost", "data-verdict", "")

	// Follow: a new flow is a new row on top, and its edge is drawn.
	src.live <- tcp(0, "shop/checkout", "shop/cart", 8080, flow.Forwarded)
	if err := browsertest.WaitFor(ctx, `tr.flow[data-source="shop/checkout"]`, waitLimit); err != nil {
		t.Fatal(err)
	}
	if err := browsertest.WaitFor(ctx, `g.edge[data-edge="shop/checkout->shop/cart"]`, waitLimit); err != nil {
		t.Fatal(err)
	}
	first, err := browsertest.Text(ctx, "tr.flow td.source")
	if err != nil || !strings.HasPrefix(first, "shop/checkout:") {
		t.Errorf("the table's first row is from %q (%v), want the newest flow, from shop/checkout", first, err)
	}
}

// keep=3 bounds what the page asks for and keeps: the newest three rows, also after
// more flows arrive.
func TestBrowserKeepsTheLastFlows(t *testing.T) {
	ctx := browsertest.Start(t)
	src := newFakeSource(shopFlows()...)
	srv := serve(t, src)
	dumpOnFailure(t, ctx)
	if err := browsertest.Open(ctx, srv.URL+"/?keep=3"); err != nil {
		t.Fatal(err)
	}
	if err := browsertest.WaitFor(ctx, `tr.flow.lost`, waitLimit); err != nil {
		t.Fatal(err)
	}
	assertList(t, ctx, "tr.flow", "data-source", "", "shop/cart", "shop/frontend")
	src.live <- tcp(0, "shop/one", "shop/cart", 8080, flow.Forwarded)
	src.live <- tcp(0, "shop/two", "shop/cart", 8080, flow.Forwarded)
	if err := browsertest.WaitFor(ctx, `tr.flow[data-source="shop/two"]`, waitLimit); err != nil {
		t.Fatal(err)
	}
	assertList(t, ctx, "tr.flow", "data-source", "shop/two", "shop/one", "")
	if err := browsertest.WaitFor(ctx, `g.edge[data-edge="shop/two->shop/cart"]`, waitLimit); err != nil {
		t.Fatal(err)
	}
	// The graph comes from the kept flows only: the Service edges' flows are gone.
	assertSet(t, ctx, "g.edge", "data-edge", "shop/one->shop/cart", "shop/two->shop/cart")
}

// assertSet checks the attribute values of the elements matching sel, in any order.
func assertSet(t *testing.T, ctx context.Context, sel, attr string, want ...string) {
	t.Helper()
	got, err := browsertest.Attr(ctx, sel, attr)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s %s = %q, want %q", sel, attr, got, want)
	}
}

// assertList checks them in document order.
func assertList(t *testing.T, ctx context.Context, sel, attr string, want ...string) {
	t.Helper()
	got, err := browsertest.Attr(ctx, sel, attr)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s %s = %q, want %q", sel, attr, got, want)
	}
}
