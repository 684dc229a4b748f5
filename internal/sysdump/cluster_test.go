package sysdump

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// pagedCluster is an apiserver holding pods Pods, served a page of the asked limit at
// a time (all of them when none is asked, as an apiserver does); every other list is
// empty and every object read by name missing. It records the limits asked.
type pagedCluster struct {
	pods int

	mu     sync.Mutex
	limits []string
}

func (c *pagedCluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path != "/api/v1/pods" {
		if strings.Contains(r.URL.Path, "/configmaps/") {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `{"apiVersion":"v1","kind":"List","metadata":{},"items":[]}`)
		return
	}
	q := r.URL.Query()
	c.mu.Lock()
	c.limits = append(c.limits, q.Get("limit"))
	c.mu.Unlock()
	from, _ := strconv.Atoi(q.Get("continue"))
	to := c.pods
	if limit, err := strconv.Atoi(q.Get("limit")); err == nil && from+limit < to {
		to = from + limit
	}
	list := map[string]any{"apiVersion": "v1", "kind": "PodList", "metadata": map[string]any{}}
	if to < c.pods {
		list["metadata"] = map[string]any{"continue": strconv.Itoa(to)}
	}
	var items []any
	for i := from; i < to; i++ {
		items = append(items, map[string]any{"metadata": map[string]any{"name": fmt.Sprintf("pod-%05d", i), "namespace": "default"},
			"spec": map[string]any{"nodeName": "n1"}})
	}
	list["items"] = items
	_ = json.NewEncoder(w).Encode(list)
}

// dumpCluster runs a dump of c's objects (no nodes) with a bound of budget bytes a
// file (0: the default), and returns the pods written and the manifest's errors.
func dumpCluster(t *testing.T, c *pagedCluster, budget int) ([]any, map[string]string) {
	t.Helper()
	srv := httptest.NewServer(c)
	defer srv.Close()
	dyn, err := dynamic.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "dump.tar.gz")
	var log strings.Builder
	if err := Run(context.Background(), &log, Options{Dynamic: dyn, Output: out, clusterFileBytes: budget}); err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out)
	var pods struct{ Items []any }
	var man Manifest
	for name, body := range files {
		switch {
		case strings.HasSuffix(name, "/cluster/pods.json"):
			if err := json.Unmarshal([]byte(body), &pods); err != nil {
				t.Fatalf("pods.json: %v", err)
			}
		case strings.HasSuffix(name, "/manifest.json"):
			if err := json.Unmarshal([]byte(body), &man); err != nil {
				t.Fatalf("manifest.json: %v", err)
			}
		}
	}
	return pods.Items, man.Errors
}

// Cluster objects are listed a page of 500 at a time, every page kept.
func TestClusterListPaged(t *testing.T) {
	c := &pagedCluster{pods: 1200}
	pods, errs := dumpCluster(t, c, 0)
	if len(pods) != 1200 {
		t.Errorf("pods.json holds %d pods, want 1200", len(pods))
	}
	if e := errs["cluster/pods.json"]; e != "" {
		t.Errorf("pods.json recorded as failed: %s", e)
	}
	if strings.Join(c.limits, ",") != "500,500,500" {
		t.Errorf("pod lists asked for limits %q, want three pages of 500", c.limits)
	}
}

// A list beyond the bound of one file is cut there: what came before is written and
// the manifest says which kind was cut after how many objects.
func TestClusterListBounded(t *testing.T) {
	c := &pagedCluster{pods: 1200}
	pods, errs := dumpCluster(t, c, 20000)
	if len(pods) == 0 || len(pods) >= 1200 {
		t.Fatalf("pods.json holds %d of 1200 pods, want it cut at the bound of 20000 bytes", len(pods))
	}
	e := errs["cluster/pods.json"]
	for _, want := range []string{"pods", fmt.Sprintf("the first %d", len(pods)), "20000 bytes"} {
		if !strings.Contains(e, want) {
			t.Errorf("manifest error for pods.json %q: want it to say %q", e, want)
		}
	}
	if len(c.limits) > 2 {
		t.Errorf("%d pages asked for, want the lists to stop at the bound", len(c.limits))
	}
}
