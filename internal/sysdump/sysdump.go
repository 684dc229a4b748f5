package sysdump

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/myelin-net/myelin/internal/termtext"
	"github.com/myelin-net/myelin/internal/version"
)

// Options configure one dump.
type Options struct {
	// Dynamic reads the cluster objects; nil leaves them out (no cluster reachable).
	Dynamic dynamic.Interface
	// Nodes are the nodes to collect from.
	Nodes []Node
	// DropsFor is how long each node's drops are collected (the nodes are told it):
	// a node's collection is bounded to NodeTimeout beyond it.
	DropsFor time.Duration
	// Output is the archive's path ("" = myelin-sysdump-<time>.tar.gz here).
	Output string
	// MapEntries bounds each map's dump (0: only how many entries it holds); LogBytes
	// each agent log (0: DefaultLogBytes).
	MapEntries, LogBytes int

	// nodeTimeout bounds one node's collection beyond DropsFor (0: NodeTimeout);
	// tests make it small.
	nodeTimeout time.Duration
	// clusterFileBytes bounds one cluster/<kind>.json (0: ClusterFileBytes); tests
	// make it small.
	clusterFileBytes int
}

// The defaults and bounds of the flags of `myelin sysdump`.
const (
	DefaultMapEntries = 100
	DefaultLogBytes   = 1 << 20
	DefaultDropsFor   = 3 * time.Second
	// MaxDropsFor bounds --drops-for: it is waited on every node in turn.
	MaxDropsFor = 5 * time.Minute
	// NodeTimeout bounds the collection of one node beyond --drops-for: a node whose
	// agent or commands hang (each command is stopped after a minute) costs no more.
	NodeTimeout = 3 * time.Minute
	// ClusterFileBytes bounds the objects (their compact JSON) kept in one
	// cluster/<kind>.json: a cluster of 100k Pods or a storm of Events must not fill
	// the memory of the machine running the dump.
	ClusterFileBytes = 64 << 20
)

// CheckFlags says what is wrong with --map-entries, --log-bytes or --drops-for.
func CheckFlags(mapEntries, logBytes int, dropsFor time.Duration) error {
	switch {
	case mapEntries < 0:
		return fmt.Errorf("--map-entries %d: use 0 (only each map's size) or more", mapEntries)
	case logBytes < 1:
		return fmt.Errorf("--log-bytes %d: use 1 or more", logBytes)
	case dropsFor <= 0 || dropsFor > MaxDropsFor:
		return fmt.Errorf("--drops-for %v: use a duration above 0 and at most %v (it is waited on every node in turn)", dropsFor, MaxDropsFor)
	}
	return nil
}

// Run writes the archive and prints its path and what could not be collected.
func Run(ctx context.Context, out io.Writer, o Options) error {
	now := time.Now().UTC()
	top := "myelin-sysdump-" + now.Format("20060102-150405")
	if o.Output == "" {
		o.Output = top + ".tar.gz"
	}
	if o.LogBytes == 0 {
		o.LogBytes = DefaultLogBytes
	}
	f, err := createPrivate(o.Output)
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // left only when the archive was not finished
	defer f.Close()
	a := newArchive(f, top, now)
	if o.Dynamic != nil {
		collectCluster(ctx, a, o.Dynamic, cmp.Or(o.clusterFileBytes, ClusterFileBytes))
	} else {
		a.failed("cluster/", fmt.Errorf("no cluster: no kubeconfig found"))
	}
	taken := map[string]bool{}
	for _, n := range o.Nodes {
		if err := checkName(n.Name()); err != nil {
			a.failed(fmt.Sprintf("nodes/%q", n.Name()), err)
			continue
		}
		name := uniqueName(n.Name(), taken)
		fmt.Fprintf(out, "Collecting from node %s...\n", termtext.Printable(name))
		collectNode(ctx, a, n, name, cmp.Or(o.nodeTimeout, NodeTimeout)+o.DropsFor, o)
	}
	if len(o.Nodes) == 0 {
		a.failed("nodes/", fmt.Errorf("no myelin agent found on this machine"))
	}
	if err := a.close(version.Version); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", o.Output, err)
	}
	if err := os.Rename(f.Name(), o.Output); err != nil {
		return fmt.Errorf("write %s: %w", o.Output, err)
	}
	abs, _ := filepath.Abs(o.Output)
	fmt.Fprintf(out, "Wrote %s: %d files, %d not collected (see manifest.json)\n", abs, len(a.files), len(a.errors))
	names := make([]string, 0, len(a.errors))
	for name := range a.errors {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		// errors quote what nodes answered: escaped, they can't drive the terminal
		e := string(Redact([]byte(a.errors[name])))
		fmt.Fprintf(out, "  not collected: %s: %s\n", termtext.Printable(name), termtext.Printable(e))
	}
	return nil
}

// uniqueName is name, or name-2, name-3... when taken already holds it (two agents
// answering for one node must not write each other's files), and marks it taken.
func uniqueName(name string, taken map[string]bool) string {
	u := name
	for i := 2; taken[u]; i++ {
		u = fmt.Sprintf("%s-%d", name, i)
	}
	taken[u] = true
	return u
}

// createPrivate creates a new file, readable by its owner only, next to path, for the
// archive to be renamed to path once whole: a file or symlink already at path (one
// planted in /tmp for a sysdump run as root) is replaced, never written through, and
// an unfinished archive never takes path.
func createPrivate(path string) (*os.File, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".*") // O_EXCL, mode 0600
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return f, nil
}
