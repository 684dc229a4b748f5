package sysdump

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Node is where one node's part of the dump comes from: its agent's API, commands
// run on the node (in its network namespace), the agent's log and pinned maps.
type Node interface {
	Name() string
	// Agent returns one of the agent's JSON views: status, config, services,
	// endpoints, policy.
	Agent(ctx context.Context, view string) (any, error)
	// Drops returns the drop events the agent reports for a short while, one a line.
	Drops(ctx context.Context) ([]byte, error)
	// Run runs a command on the node and returns its output (bpftool, ip).
	Run(ctx context.Context, argv ...string) ([]byte, error)
	// Log returns the end of the agent's log (at most max bytes).
	Log(ctx context.Context, max int) ([]byte, error)
	// Maps returns the node's pinned maps by name, each bounded to max entries.
	Maps(ctx context.Context, max int) (map[string]any, error)
}

// bpfLister is a node without bpftool that lists programs and links itself
// (ListBPFObjects as JSON), in bpf-objects.json.
type bpfLister interface {
	BPF(ctx context.Context) ([]byte, error)
}

// AgentViews are the agent's views a dump holds, one file each.
var AgentViews = []string{"status", "config", "services", "endpoints", "policy"}

// collectNode writes nodes/<name>/... for one node, within limit in all: what fails
// is recorded, not fatal, and a node that hangs is left at limit with what it gave
// until then.
func collectNode(ctx context.Context, a *archive, n Node, name string, limit time.Duration, o Options) {
	dir := "nodes/" + name + "/"
	nctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for _, step := range nodeSteps(n, dir, o) {
		step(nctx, a)
		if nctx.Err() != nil {
			if ctx.Err() == nil {
				a.failed(dir, fmt.Errorf("node %s: stopped after %v, the bound of one node's collection: "+
					"the files before are kept, the rest left out; see why its agent or commands hang (its agent's log, `myelin status` on it)", name, limit))
			}
			return
		}
	}
}

// nodeStep collects one part of a node's dump into the archive.
type nodeStep func(ctx context.Context, a *archive)

// nodeSteps are the parts of n's dump in the order they are collected.
func nodeSteps(n Node, dir string, o Options) []nodeStep {
	var steps []nodeStep
	for _, view := range AgentViews {
		steps = append(steps, func(ctx context.Context, a *archive) {
			v, err := n.Agent(ctx, view)
			if err == nil {
				err = a.addJSON(dir+view+".json", v) // e.g. an answer cut short: recorded, never silently left out
			}
			if err != nil {
				a.failed(dir+view+".json", err)
			}
		})
	}
	steps = append(steps,
		outputStep(dir+"drops.txt", n.Drops),
		outputStep(dir+"agent.log", func(ctx context.Context) ([]byte, error) { return n.Log(ctx, o.LogBytes) }))
	if b, ok := n.(bpfLister); ok {
		steps = append(steps, outputStep(dir+"bpf-objects.json", b.BPF))
	} else {
		steps = append(steps,
			runStep(n, dir+"bpf-net.json", "bpftool", "-j", "net", "show"),
			runStep(n, dir+"bpf-links.json", "bpftool", "-j", "link", "show"))
	}
	steps = append(steps,
		runStep(n, dir+"ip-addr.txt", "ip", "-d", "addr", "show"),
		runStep(n, dir+"ip-route.txt", "ip", "route", "show", "table", "all"),
		func(ctx context.Context, a *archive) { addMaps(ctx, a, n, dir, o.MapEntries) })
	return steps
}

// addMaps writes each of the node's pinned maps, max entries at most, in maps/.
func addMaps(ctx context.Context, a *archive, n Node, dir string, max int) {
	maps, err := n.Maps(ctx, max)
	if err != nil {
		a.failed(dir+"maps/", err)
		return
	}
	for name, m := range maps {
		if err := checkName(name); err != nil {
			a.failed(fmt.Sprintf("%smaps/%q", dir, name), err) // the agent chose the name: never a path
			continue
		}
		if err := a.addJSON(dir+"maps/"+name+".json", m); err != nil {
			a.failed(dir+"maps/"+name+".json", err)
		}
	}
}

// runStep writes the output of argv run on the node into name.
func runStep(n Node, name string, argv ...string) nodeStep {
	return outputStep(name, func(ctx context.Context) ([]byte, error) { return n.Run(ctx, argv...) })
}

// outputStep writes what get returns into name; what it returned with an error (an
// output cut short) is kept too.
func outputStep(name string, get func(context.Context) ([]byte, error)) nodeStep {
	return func(ctx context.Context, a *archive) {
		out, err := get(ctx)
		if err != nil {
			a.failed(name, err)
		}
		if len(out) > 0 {
			_ = a.add(name, out)
		}
	}
}

// MapDump is one map's first entries and how many it held.
type MapDump struct {
	Total   int               `json:"total"`
	Shown   int               `json:"shown"`
	Entries []json.RawMessage `json:"entries"`
	// Error says why the walk stopped early (socket storage can't be walked from
	// user space); Total and Entries are what it read until then.
	Error string `json:"error,omitempty"`
}

// ReadEntries reads bpftool's JSON map dump (one list) from r as it comes: the first
// max entries are kept, the rest only counted, and at most limit bytes are read (a
// conntrack map pods filled is hundreds of MB of JSON); Error says where the read
// stopped early, Total then counts the entries read until there.
func ReadEntries(r io.Reader, max int, limit int64) MapDump {
	lr := &io.LimitedReader{R: r, N: limit}
	dec := json.NewDecoder(lr)
	var d MapDump
	fail := func(err error) MapDump {
		if lr.N <= 0 {
			d.Error = fmt.Sprintf("bpftool output truncated at %d bytes: total counts the entries before", limit)
		} else {
			d.Error = fmt.Sprintf("bpftool output is not a JSON list: %v", err)
		}
		d.Shown = len(d.Entries)
		return d
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return fail(fmt.Errorf("starts with %v (%v)", tok, err))
	}
	for dec.More() {
		var e json.RawMessage
		if err := dec.Decode(&e); err != nil {
			return fail(err)
		}
		d.Total++
		if len(d.Entries) < max {
			d.Entries = append(d.Entries, e)
		}
	}
	if _, err := dec.Token(); err != nil {
		return fail(err)
	}
	d.Shown = len(d.Entries)
	return d
}
