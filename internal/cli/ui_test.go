package cli

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/hubble"
)

type storedFlows []*flow.Flow

func (s storedFlows) Flows(ctx context.Context, _ flow.Request, out chan<- *flow.Flow) error {
	for _, f := range s {
		select {
		case out <- f:
		case <-ctx.Done():
			return nil
		}
	}
	<-ctx.Done()
	return nil
}

// TestUIServer: `myelin ui --server` serves the flows of a Hubble Observer API, and
// refuses a Host it was not given.
func TestUIServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	hubble.Register(g, hubble.NewServer(hubble.Config{Node: "n1", Source: storedFlows{{
		Node: "n1", Type: flow.TypeL3L4, Verdict: flow.Dropped, Protocol: "TCP", DstPort: 8080,
		Source: flow.Endpoint{IP: "10.244.0.5", Namespace: "shop", Pod: "client"}, Destination: flow.Endpoint{IP: "10.244.1.7"},
	}}}))
	go g.Serve(lis)
	t.Cleanup(g.Stop)

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- UI(ctx, pw, UIOptions{Listen: "127.0.0.1:0", Server: lis.Addr().String(), AllowedHosts: []string{"myelin-ui"}})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("UI: %v", err)
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSuffix(strings.TrimSpace(line[strings.Index(line, "http://"):]), "/")

	req, _ := http.NewRequest("GET", url+"/healthz", nil)
	req.Host = "evil.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("Host evil.example.com: status %d, want 403", resp.StatusCode)
	}

	req, _ = http.NewRequestWithContext(ctx, "GET", url+"/api/flows?keep=10", nil)
	req.Host = "myelin-ui"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/flows: status %d", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read the stream: %v", err)
		}
		if strings.HasPrefix(l, "data: ") && strings.Contains(l, `"pod":"client"`) {
			if !strings.Contains(l, `"verdict":"DROPPED"`) || !strings.Contains(l, `"dstPort":8080`) {
				t.Errorf("flow from the server: %s", l)
			}
			return
		}
	}
}

func TestUIServerBadFlags(t *testing.T) {
	for _, o := range []UIOptions{{Server: "relay"}, {Server: "relay:4245", Socket: "/run/a.sock"}} {
		err := UI(context.Background(), io.Discard, o)
		if err == nil || !strings.Contains(err.Error(), "--server") {
			t.Errorf("UI(%+v): %v, want an error naming --server", o, err)
		}
	}
}
