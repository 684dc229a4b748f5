package lab

import (
	"context"
	"encoding/json"
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

// SysdumpNodes lists the running lab's nodes, in plan order.
func SysdumpNodes(paths labplan.Paths, dropsFor time.Duration) ([]sysdump.Node, error) {
	plan, err := LoadPlan(paths)
	if err != nil {
		return nil, err
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
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := n.client()
	switch view {
	case "status":
		return c.Status(ctx)
	case "config":
		return c.Config(ctx)
	case "services":
		return c.Services(ctx)
	case "endpoints":
		return c.Endpoints(ctx)
	case "policy":
		return c.Policy(ctx)
	}
	return nil, fmt.Errorf("unknown agent view %q", view)
}

// Drops streams the agent's drop events for DropsFor, one JSON object a line.
func (n SysdumpNode) Drops(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, n.DropsFor)
	defer cancel()
	var out []byte
	err := n.client().Monitor(ctx, "drop", func(ev api.Event) error {
		b, _ := json.Marshal(ev)
		out = append(append(out, b...), '\n')
		return nil
	})
	if err != nil && ctx.Err() == nil {
		return out, err
	}
	return out, nil
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

// Maps lists the maps pinned in the node's pin directory (links are in links/).
func (n SysdumpNode) Maps() ([]string, error) {
	dir := nodelayout.PerNode(nodelayout.BPFFSDir, n.Node)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no pinned maps in " + dir)
	}
	return out, nil
}
