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
	"github.com/myelin-net/myelin/internal/capbuf"
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

// runTimeout bounds one command run on a node; runOutput what is kept of its output
// and mapDumpBytes what is read of one map's dump: a hung or endless command must not
// hold the dump or fill memory.
const (
	runTimeout   = time.Minute
	runOutput    = 16 << 20
	mapDumpBytes = 64 << 20
)

// command is argv in the node's network namespace, killed at ctx's end.
func (n SysdumpNode) command(ctx context.Context, argv []string) *exec.Cmd {
	full := append([]string{"nsenter", "--net=" + labplan.NetNSPath(n.Node), "--"}, argv...)
	return exec.CommandContext(ctx, full[0], full[1:]...)
}

// Run runs argv in the node's network namespace: at most runTimeout, the first
// runOutput bytes of its output kept (then it is stopped).
func (n SysdumpNode) Run(ctx context.Context, argv ...string) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	cmd := n.command(rctx, argv)
	out := capbuf.New(runOutput, cancel)
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	return out.Bytes(), n.runError(ctx, rctx, argv, err, out)
}

// runError says why a command failed: its output was cut, it ran out of time, or
// its own error and first line.
func (n SysdumpNode) runError(ctx, rctx context.Context, argv []string, err error, out *capbuf.Buffer) error {
	switch {
	case out.Err() != nil:
		return fmt.Errorf("%v on node %s: %w", argv, n.Node, out.Err())
	case err != nil && ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%v on node %s: no answer in %v, stopped", argv, n.Node, runTimeout)
	case err != nil:
		return fmt.Errorf("%v on node %s: %w: %s", argv, n.Node, err, firstLineOf(out.Bytes()))
	}
	return nil
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
	return io.ReadAll(io.LimitReader(f, int64(max))) // the agent may be writing it now
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
		out[e.Name()] = n.dumpMap(ctx, filepath.Join(dir, e.Name()), max)
	}
	if len(out) == 0 {
		return nil, errors.New("no pinned maps in " + dir)
	}
	return out, nil
}

// dumpMap reads one pinned map's bpftool dump as bpftool writes it, keeping max
// entries and reading at most mapDumpBytes; bpftool is stopped where the read stops.
func (n SysdumpNode) dumpMap(ctx context.Context, pin string, max int) sysdump.MapDump {
	rctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	argv := []string{"bpftool", "-j", "map", "dump", "pinned", pin}
	cmd := n.command(rctx, argv)
	stderr := capbuf.New(4096, nil)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		return sysdump.MapDump{Error: fmt.Sprintf("%v on node %s: %v", argv, n.Node, err)}
	}
	d := sysdump.ReadEntries(stdout, max, mapDumpBytes)
	if d.Error != "" {
		cancel() // the rest is not read: stop bpftool rather than wait for it
	}
	err = cmd.Wait()
	switch {
	case ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded):
		d.Error = fmt.Sprintf("%v on node %s: no answer in %v, stopped (total counts the entries before)", argv, n.Node, runTimeout)
	case err != nil && d.Error == "":
		d.Error = fmt.Sprintf("%v on node %s: %v: %s", argv, n.Node, err, firstLineOf(stderr.Bytes()))
	}
	return d
}
