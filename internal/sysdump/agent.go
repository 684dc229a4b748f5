package sysdump

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"

	"github.com/myelin-net/myelin/internal/api"
)

// AgentView asks an agent for one of AgentViews.
func AgentView(ctx context.Context, c *api.Client, view string) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
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
	return nil, fmt.Errorf("unknown agent view %q: use one of %v", view, AgentViews)
}

// maxDropsBytes bounds the drop events AgentDrops keeps: a pod sending denied
// packets at line rate has the agent stream events as fast as it can, for up to
// --drops-for, into the memory of the process that collects them.
const maxDropsBytes = 16 << 20

// errDropsFull ends AgentDrops's stream at maxDropsBytes.
var errDropsFull = errors.New("drop events full")

// AgentDrops streams an agent's drop events for d, one JSON object a line, at most
// maxDropsBytes of them; then a last line {"sysdump": "..."} says the rest was cut.
func AgentDrops(ctx context.Context, c *api.Client, d time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var out []byte
	events := 0
	err := c.Monitor(ctx, "drop", func(ev api.Event) error {
		b, _ := json.Marshal(ev)
		if len(out)+len(b)+1 > maxDropsBytes {
			return errDropsFull
		}
		out = append(append(out, b...), '\n')
		events++
		return nil
	})
	if errors.Is(err, errDropsFull) {
		cut, _ := json.Marshal(map[string]string{"sysdump": fmt.Sprintf("drop events cut after %d (%d MiB) of the %s asked for: "+
			"something drops packets very fast (myelin status counts them by reason)", events, maxDropsBytes>>20, d)})
		return append(append(out, cut...), '\n'), nil
	}
	if err != nil && ctx.Err() == nil {
		return out, err
	}
	return out, nil
}

// DumpPinnedMaps reads the first max entries of every map pinned in dir (not in its
// subdirectories, where links are), keys and values in hex: what a node without
// bpftool (the agent's image) can give.
func DumpPinnedMaps(dir string, max int) (map[string]MapDump, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read pin directory: %w", err)
	}
	out := map[string]MapDump{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, e.Name()), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			continue // a pinned program or link, or not ours to read
		}
		out[e.Name()] = dumpMap(m, max)
		m.Close()
	}
	return out, nil
}

func dumpMap(m *ebpf.Map, max int) MapDump {
	var d MapDump
	key := make([]byte, m.KeySize())
	var value any = new([]byte)
	switch m.Type() {
	case ebpf.PerCPUHash, ebpf.PerCPUArray, ebpf.LRUCPUHash, ebpf.PerCPUCGroupStorage:
		value = new([][]byte)
	}
	it := m.Iterate()
	for it.Next(&key, value) {
		d.Total++
		if d.Shown >= max {
			continue
		}
		e := map[string]any{"key": hex.EncodeToString(key)}
		switch v := value.(type) {
		case *[]byte:
			e["value"] = hex.EncodeToString(*v)
		case *[][]byte:
			var cpus []string
			for _, c := range *v {
				cpus = append(cpus, hex.EncodeToString(c))
			}
			e["values"] = cpus
		}
		b, _ := json.Marshal(e)
		d.Entries = append(d.Entries, b)
		d.Shown++
	}
	if err := it.Err(); err != nil {
		d.Error = err.Error()
	}
	return d
}
