package sysdump

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
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
