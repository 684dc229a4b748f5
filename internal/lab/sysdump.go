package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/lab/cni/myelin"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/nodelayout"
	"github.com/myelin-net/myelin/internal/sysdump"
)

// SysdumpNode is one lab node for `myelin sysdump`: its agent's socket, its netns,
// its pins and its agent's log in the lab directory.
type SysdumpNode struct {
	Paths labplan.Paths
	Node  string
	// DropsFor is how long drops are collected from the agent's monitor.
	DropsFor time.Duration
}

// SysdumpNodes lists the running lab's nodes, in plan order, when its agents are the
// lab's processes (--cni myelin); otherwise none (with --cni none the chart's agent
// pods are read as on any cluster).
func SysdumpNodes(paths labplan.Paths, dropsFor time.Duration) ([]sysdump.Node, error) {
	plan, err := LoadPlan(paths)
	if err != nil {
		return nil, err
	}
	if plan.Options.CNI != labplan.CNIMyelin {
		return nil, nil
	}
	var out []sysdump.Node
	for _, n := range plan.Nodes {
		out = append(out, SysdumpNode{Paths: paths, Node: n.Name, DropsFor: dropsFor})
	}
	return out, nil
}

// Name is the node's name.
func (n SysdumpNode) Name() string { return n.Node }

func (n SysdumpNode) client() *api.Client { return api.NewClient(api.NodeSocket(n.Node)) }

// Agent asks the node's agent for one view.
func (n SysdumpNode) Agent(ctx context.Context, view string) (any, error) {
	return sysdump.AgentView(ctx, n.client(), view)
}

// Drops streams the agent's drop events for DropsFor.
func (n SysdumpNode) Drops(ctx context.Context) ([]byte, error) {
	return sysdump.AgentDrops(ctx, n.client(), n.DropsFor)
}

// Run runs argv in the node's network namespace.
func (n SysdumpNode) Run(ctx context.Context, argv ...string) ([]byte, error) {
	full := append([]string{"nsenter", "--net=" + labplan.NetNSPath(n.Node), "--"}, argv...)
	out, err := exec.CommandContext(ctx, full[0], full[1:]...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%v: %w: %s", argv, err, firstLineOf(out))
	}
	return out, nil
}

func firstLineOf(b []byte) string {
	for i, c := range b {
		if c == '\n' {
			return string(b[:i])
		}
	}
	return string(b)
}

// Log returns the end of the node's agent log.
func (n SysdumpNode) Log(_ context.Context, max int) ([]byte, error) {
	f, err := os.Open(n.Paths.Log(myelin.AgentProcess(n.Node)))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > int64(max) {
		if _, err := f.Seek(-int64(max), io.SeekEnd); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(f)
}

// Maps dumps every map pinned in the node's pin directory with bpftool (links are in
// links/), which formats keys and values by their BTF types.
func (n SysdumpNode) Maps(ctx context.Context, max int) (map[string]any, error) {
	dir := nodelayout.PerNode(nodelayout.BPFFSDir, n.Node)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		dump, err := n.Run(ctx, "bpftool", "-j", "map", "dump", "pinned", filepath.Join(dir, e.Name()))
		if err != nil {
			out[e.Name()] = map[string]string{"error": err.Error()}
			continue
		}
		out[e.Name()] = sysdump.BoundEntries(dump, max)
	}
	if len(out) == 0 {
		return nil, errors.New("no pinned maps in " + dir)
	}
	return out, nil
}
