package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/flow"
)

type event struct{ name, data string }

// readEvents reads n server-sent events (comments and retry lines skipped).
func readEvents(t *testing.T, r *bufio.Reader, n int) []event {
	t.Helper()
	var out []event
	var cur event
	for len(out) < n {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read the stream after %d events: %v", len(out), err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && cur.name != "":
			out = append(out, cur)
			cur = event{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}

func TestStreamFollows(t *testing.T) {
	src := newFakeSource(
		tcp(3*time.Second, "shop/a", "shop/b", 80, flow.Forwarded),
		tcp(2*time.Second, "shop/a", "db/c", 5432, flow.Dropped),
		&flow.Flow{Time: time.Now(), Type: flow.TypeLost, Lost: 4},
	)
	srv := serve(t, src)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/flows?keep=2&namespace=shop", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("GET api/flows: %s, Content-Type %q; want 200 text/event-stream", resp.Status, ct)
	}
	r := bufio.NewReader(resp.Body)
	evs := readEvents(t, r, 3)
	var h hello
	if evs[0].name != "hello" || json.Unmarshal([]byte(evs[0].data), &h) != nil || h.Keep != 2 || h.WindowSeconds != 300 {
		t.Fatalf("first event %+v, want hello with keep 2 and a 300 s window", evs[0])
	}
	var got []flow.Flow
	for _, e := range evs[1:] {
		var f flow.Flow
		if e.name != "flow" || json.Unmarshal([]byte(e.data), &f) != nil {
			t.Fatalf("event %+v, want a flow", e)
		}
		got = append(got, f)
	}
	if got[0].Verdict != flow.Dropped || got[1].Type != flow.TypeLost || got[1].Lost != 4 {
		t.Errorf("stored flows %+v, want the newest two (the drop, then the LOST record)", got)
	}
	src.live <- tcp(0, "shop/new", "shop/b", 80, flow.Forwarded)
	var f flow.Flow
	if e := readEvents(t, r, 1)[0]; e.name != "flow" || json.Unmarshal([]byte(e.data), &f) != nil || f.Source.Pod != "new" {
		t.Errorf("followed event %+v, want the pushed flow from shop/new", e)
	}
	reqs := src.requests()
	if len(reqs) != 1 || reqs[0].Last != 2 || !reqs[0].Follow || len(reqs[0].Whitelist) != 2 {
		t.Errorf("the Source got %+v, want one request for the last 2 flows of namespace shop, following", reqs)
	}
}

func TestStreamReportsSourceFailure(t *testing.T) {
	src := newFakeSource(tcp(time.Second, "shop/a", "shop/b", 80, flow.Forwarded))
	src.err = errors.New("dial the agent of myelin-node-2: connection refused")
	srv := serve(t, src)
	resp, err := http.Get(srv.URL + "/api/flows")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	evs := readEvents(t, bufio.NewReader(resp.Body), 3)
	if evs[1].name != "flow" || evs[2].name != "failure" || !strings.Contains(evs[2].data, "connection refused") {
		t.Errorf("events %+v, want hello, the stored flow, then a failure naming the error", evs)
	}
}

func TestBadQueryIsAClearError(t *testing.T) {
	srv := serve(t, newFakeSource())
	for _, path := range []string{"/?keep=lots", "/api/flows?keep=lots"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `keep="lots": use a number of flows from 1 to 10000`) {
			t.Errorf("GET %s: %s %q, want 400 naming keep and what it takes", path, resp.Status, body)
		}
	}
}

func TestPageServed(t *testing.T) {
	srv := serve(t, newFakeSource())
	for path, want := range map[string]string{
		"/":             `<svg id="graph"`,
		"/ui/app.js":    `new EventSource("api/flows"`,
		"/ui/style.css": `.edge.dropped path`,
		"/healthz":      "ok",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %s, body without %q", path, resp.Status, want)
		}
	}
}

// The page must work without the internet: nothing it ships names another host
// (the SVG namespace is a name, not a fetch).
func TestPageFetchesNothingElsewhere(t *testing.T) {
	url := regexp.MustCompile(`(https?:)?//[a-zA-Z0-9.-]+`)
	err := fs.WalkDir(web, "web", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := web.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range url.FindAllString(string(b), -1) {
			if m != "http://www.w3.org" {
				t.Errorf("%s names %s: the page must load everything from its own server", path, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
