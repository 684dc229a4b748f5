package sysdump

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// deepNode's agent answers with JSON nested depth levels deep ([[[...]]]), its views
// and its maps alike: what a broken or hostile agent can send.
type deepNode struct {
	fakeNode
	depth int
}

func (d deepNode) raw() json.RawMessage {
	return json.RawMessage(strings.Repeat("[", d.depth) + strings.Repeat("]", d.depth))
}

func (d deepNode) Agent(context.Context, string) (any, error) { return d.raw(), nil }

func (d deepNode) Maps(context.Context, int) (map[string]any, error) {
	return map[string]any{"myelin_deep": d.raw()}, nil
}

// An agent's JSON goes into the archive as it came, not re-indented: indenting JSON
// nested n levels deep writes about n² bytes, so a few KB of answer would become MBs.
func TestAgentJSONNotReindented(t *testing.T) {
	const depth = 2000 // 4 KB of input; indented it would be about 8 MB
	n := deepNode{fakeNode{"n1"}, depth}
	out := filepath.Join(t.TempDir(), "dump.tar.gz")
	var log strings.Builder
	if err := Run(context.Background(), &log, Options{Nodes: []Node{n}, Output: out}); err != nil {
		t.Fatal(err)
	}
	files := map[string]int{}
	for _, e := range archiveEntries(t, out) {
		_, rest, _ := strings.Cut(e.Name, "/")
		files[rest] = len(e.Data)
	}
	for _, f := range []string{"nodes/n1/status.json", "nodes/n1/policy.json", "nodes/n1/maps/myelin_deep.json"} {
		size, ok := files[f]
		if !ok {
			t.Errorf("archive lacks %s:\n%s", f, log.String())
			continue
		}
		if size > 2*len(n.raw())+1 {
			t.Errorf("%s holds %d bytes for an answer of %d: re-indented", f, size, len(n.raw()))
		}
	}
}

// An apiserver that ignores limitBytes gets no more than --log-bytes of the agent's
// log into the archive, and the cut is said.
func TestPodNodeLogBounded(t *testing.T) {
	const max = 100
	var asked atomic.Value // the limitBytes the request asked for
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/kube-system/pods/myelin-x/log" {
			http.NotFound(w, r)
			return
		}
		asked.Store(r.URL.Query().Get("limitBytes"))
		line := []byte("level=info msg=tick\n")
		for range 1000 { // 20 KB, whatever limitBytes asked
			if _, err := w.Write(line); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	n := PodNode{Client: cs, Pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "myelin-x"},
		Spec: corev1.PodSpec{NodeName: "n1"}}}
	out, err := n.Log(context.Background(), max)
	if len(out) > max || len(out) == 0 {
		t.Errorf("kept %d bytes of the log, want 1 to %d", len(out), max)
	}
	for _, want := range []string{"kube-system/myelin-x", "node n1", "truncated at 100 bytes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v: want it to say %q", err, want)
		}
	}
	if got := asked.Load(); got != "100" {
		t.Errorf("the request asked for limitBytes %q, want 100", got)
	}
}
