package flowclient

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/flowstore"
)

// fakeAgent serves /v1/flows from a store on a unix socket in dir.
func fakeAgent(t *testing.T, dir, name string, flows ...*flow.Flow) (string, *flowstore.Store) {
	t.Helper()
	st := flowstore.New(100)
	for _, f := range flows {
		st.Add(f)
	}
	sock := filepath.Join(dir, name+".sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/flows", func(w http.ResponseWriter, r *http.Request) { ServeFlows(w, r, st) })
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock, st
}

func at(sec int, node string) *flow.Flow {
	return &flow.Flow{Time: time.Unix(int64(sec), 0), Node: node, Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: "TCP"}
}

func read(t *testing.T, src flow.Source, req flow.Request) ([]*flow.Flow, error) {
	t.Helper()
	out := make(chan *flow.Flow, 100)
	err := src.Flows(context.Background(), req, out)
	close(out)
	var got []*flow.Flow
	for f := range out {
		got = append(got, f)
	}
	return got, err
}

func TestAgentsSourceMergesByTime(t *testing.T) {
	dir := t.TempDir()
	a, _ := fakeAgent(t, dir, "a", at(1, "a"), at(4, "a"), at(5, "a"))
	b, _ := fakeAgent(t, dir, "b", at(2, "b"), at(3, "b"), at(6, "b"))
	got, err := read(t, NewAgentsSource([]string{a, b}), flow.Request{Last: 4})
	if err != nil {
		t.Fatal(err)
	}
	var secs []int64
	for _, f := range got {
		secs = append(secs, f.Time.Unix())
	}
	if len(secs) != 4 || secs[0] != 3 || secs[1] != 4 || secs[2] != 5 || secs[3] != 6 {
		t.Errorf("merged last 4 = %v, want [3 4 5 6]", secs)
	}
}

func TestAgentsSourceSkipsAnUnreachableAgent(t *testing.T) {
	dir := t.TempDir()
	a, _ := fakeAgent(t, dir, "a", at(1, "a"))
	gone := filepath.Join(dir, "gone.sock")
	src := NewAgentsSource([]string{a, gone})
	var failed []string
	src.OnError = func(sock string, err error) { failed = append(failed, sock) }
	got, err := read(t, src, flow.Request{})
	if err != nil || len(got) != 1 || len(failed) != 1 || failed[0] != gone {
		t.Errorf("got %d flows, err %v, failed %v; want 1 flow and %s reported", len(got), err, failed, gone)
	}
	if _, err := read(t, NewAgentsSource([]string{gone}), flow.Request{}); err == nil {
		t.Error("every agent unreachable: no error")
	}
}

func TestAgentsSourceFollows(t *testing.T) {
	dir := t.TempDir()
	a, st := fakeAgent(t, dir, "a", at(1, "a"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan *flow.Flow)
	go func() { _ = NewAgentsSource([]string{a}).Flows(ctx, flow.Request{Follow: true, Last: 1}, out) }()
	if f := <-out; f.Time.Unix() != 1 {
		t.Fatalf("stored flow at %v, want 1", f.Time.Unix())
	}
	for st.Stats().Followers == 0 {
		time.Sleep(time.Millisecond)
	}
	st.Add(&flow.Flow{Time: time.Now(), Node: "a", Type: flow.TypeDrop, Verdict: flow.Dropped})
	if f := <-out; f.Type != flow.TypeDrop {
		t.Errorf("followed %+v, want the new drop", f)
	}
}

func TestServeFlowsRejectsAMalformedFilter(t *testing.T) {
	dir := t.TempDir()
	a, _ := fakeAgent(t, dir, "a")
	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", a)
	}}}
	resp, err := c.Get("http://agent/v1/flows?verdict=maybe")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("status %d, want 400", resp.StatusCode)
	}
}

// A flow reaches the store a ring poll after the time it carries: one made before
// the stream started but stored after must still come, and the stored part once.
func TestAgentsSourceFollowsAFlowInFlight(t *testing.T) {
	dir := t.TempDir()
	a, st := fakeAgent(t, dir, "a", at(1, "a"), at(2, "a"))
	b, _ := fakeAgent(t, dir, "b", at(3, "b"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan *flow.Flow)
	before := time.Now()
	go func() { _ = NewAgentsSource([]string{a, b}).Flows(ctx, flow.Request{Follow: true, Last: 2}, out) }()
	for _, want := range []int64{2, 3} {
		if f := <-out; f.Time.Unix() != want {
			t.Fatalf("stored flow at %v, want %d", f.Time.Unix(), want)
		}
	}
	for st.Stats().Followers == 0 {
		time.Sleep(time.Millisecond)
	}
	st.Add(&flow.Flow{Time: before, Node: "a", Type: flow.TypeDrop, Verdict: flow.Dropped})
	if f := <-out; f.Type != flow.TypeDrop || !f.Time.Equal(before) {
		t.Errorf("followed %+v, want the drop stamped before the stream began", f)
	}
}

// fillFollowers makes st serve MaxFollowers follow streams until the test ends.
func fillFollowers(t *testing.T, st *flowstore.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for range flowstore.MaxFollowers {
		go func() { _ = st.Flows(ctx, flow.Request{Follow: true}, make(chan *flow.Flow)) }()
	}
	for st.Stats().Followers != flowstore.MaxFollowers {
		runtime.Gosched()
	}
}

// A follow request beyond the agent's MaxFollowers is an error status with the
// store's message, which the source reports (to OnError, and as its error when every
// agent refused), not an empty stream.
func TestAgentsSourceReportsTooManyFollowers(t *testing.T) {
	sock, st := fakeAgent(t, t.TempDir(), "a", at(1, "a"))
	fillFollowers(t, st)
	src := NewAgentsSource([]string{sock})
	var reported []string
	src.OnError = func(s string, err error) { reported = append(reported, s+": "+err.Error()) }
	got, err := read(t, src, flow.Request{Follow: true, Last: 1})
	if err == nil || !strings.Contains(err.Error(), "too many follow streams") || !strings.Contains(err.Error(), sock) {
		t.Errorf("follow beyond %d: %d flows, err %v; want an error naming the agent and the limit", flowstore.MaxFollowers, len(got), err)
	}
	if len(reported) != 1 || !strings.Contains(reported[0], fmt.Sprintf("at most %d", flowstore.MaxFollowers)) {
		t.Errorf("OnError heard %q, want the agent's refusal", reported)
	}
}

// ServeFlows answers a request its source refuses with the source's status and message.
func TestServeFlowsStatus(t *testing.T) {
	st := flowstore.New(10)
	fillFollowers(t, st)
	for _, c := range []struct {
		query string
		code  int
		want  string
	}{
		{"follow=true", http.StatusTooManyRequests, "too many follow streams"},
		{"last=5", http.StatusOK, ""},
		{"node=" + strings.Repeat("n", flow.MaxFilterValueLen+1), http.StatusBadRequest, "node"},
	} {
		rec := httptest.NewRecorder()
		ServeFlows(rec, httptest.NewRequest(http.MethodGet, "/v1/flows?"+c.query, nil), st)
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.want) {
			t.Errorf("GET /v1/flows?%.40s: %d %q, want %d saying %q", c.query, rec.Code, rec.Body.String(), c.code, c.want)
		}
	}
}
