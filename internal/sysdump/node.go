package sysdump

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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

// collectNode writes nodes/<name>/... for one node; what fails is recorded, not fatal.
func collectNode(ctx context.Context, a *archive, n Node, name string, o Options) {
	dir := "nodes/" + name + "/"
	for _, view := range AgentViews {
		v, err := n.Agent(ctx, view)
		if err != nil {
			a.failed(dir+view+".json", err)
			continue
		}
		if err := a.addJSON(dir+view+".json", v); err != nil {
			a.failed(dir+view+".json", err) // e.g. an answer cut short: recorded, never silently left out
		}
	}
	addOutput(a, dir+"drops.txt", func() ([]byte, error) { return n.Drops(ctx) })
	addOutput(a, dir+"agent.log", func() ([]byte, error) { return n.Log(ctx, o.LogBytes) })
	commands := map[string][]string{
		"ip-addr.txt":  {"ip", "-d", "addr", "show"},
		"ip-route.txt": {"ip", "route", "show", "table", "all"},
	}
	if b, ok := n.(bpfLister); ok {
		addOutput(a, dir+"bpf-objects.json", func() ([]byte, error) { return b.BPF(ctx) })
	} else {
		commands["bpf-net.json"] = []string{"bpftool", "-j", "net", "show"}
		commands["bpf-links.json"] = []string{"bpftool", "-j", "link", "show"}
	}
	for file, argv := range commands {
		addOutput(a, dir+file, func() ([]byte, error) { return n.Run(ctx, argv...) })
	}
	maps, err := n.Maps(ctx, o.MapEntries)
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

func addOutput(a *archive, name string, get func() ([]byte, error)) {
	out, err := get()
	if err != nil {
		a.failed(name, err)
	}
	if len(out) > 0 {
		_ = a.add(name, out)
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
