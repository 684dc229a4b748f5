package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/service"
)

// gcInterval is how often the datapath's garbage is collected (idle NAT and
// conntrack entries); GCPolicyCT deletes a TCP connection an RST ended at the
// round after the one that found it (datapath.policyCTResetGrace), so it is also
// that connection's grace.
const gcInterval = 10 * time.Second

// collector runs the datapath's garbage collection from the first moment the agent
// can reach the pinned maps: at start-up it adopts the maps the previous agent pinned
// (datapath.OpenPinned), before anything waits for the apiserver, then switches to the
// datapath Load returns. It never talks to the apiserver, so GC goes on while the API
// is unreachable, for as long as the agent runs.
type collector struct {
	pinDir   string
	interval time.Duration
	log      *slog.Logger
	loops    *loops
	loaded   chan *datapath.Datapath
	done     chan struct{}
	waited   bool // "waits for the load" said once
	// npEvictions samples the embryonic NodePort evictions each round, for status.
	npEvictions evictionSamples
	// policyCTEvictions samples the live connections pushed out of the policy
	// table each round, for status.
	policyCTEvictions evictionSamples
	// stats counts each table's rounds and removed entries, for metrics.
	stats gcStats
	// services, once the Service manager runs, names the backends that left a
	// frontend while others keep them: their flows through it are ended each round.
	services atomic.Pointer[service.Manager]
}

// startCollector starts the GC loop; it ends with ctx (wait for it with wait).
func startCollector(ctx context.Context, pinDir string, log *slog.Logger, l *loops) *collector {
	c := &collector{pinDir: pinDir, interval: gcInterval, log: log, loops: l, loaded: make(chan *datapath.Datapath, 1), done: make(chan struct{})}
	go c.run(ctx)
	return c
}

// use hands the loaded datapath to the GC loop, which from then on collects through
// it and closes the maps it adopted at start.
func (c *collector) use(dp *datapath.Datapath) { c.loaded <- dp }

// useServices has each round end the Service flows whose backend left their
// frontend (m's departures; endDeparted).
func (c *collector) useServices(m *service.Manager) { c.services.Store(m) }

// wait returns once the GC loop has ended and released what it adopted.
func (c *collector) wait() { <-c.done }

func (c *collector) run(ctx context.Context) {
	defer close(c.done)
	var dp *datapath.Datapath // the datapath collected through
	adopted := false          // dp was opened here, not by Load
	defer func() {
		if adopted {
			dp.Close()
		}
	}()
	ticker := time.NewTicker(c.interval)
	defer ticker.Stop()
	for {
		if dp == nil {
			dp, adopted = c.adopt(), true
			if dp == nil {
				adopted = false
			}
		}
		select {
		case <-ctx.Done():
			return
		case loaded := <-c.loaded:
			if adopted {
				dp.Close()
			}
			dp, adopted = loaded, false
			// A baseline for status's eviction window: a flood before the first
			// round must show as evictions since this sample, not as the first one.
			c.sampleEvictions(dp)
			c.samplePolicyCTEvictions(dp)
			// A round at once: the adopted maps' rounds could not list the pods
			// over their budgets (the configuration was not known), so a pod that
			// filled a table while the agent was away or waiting for the apiserver
			// is listed now, not a tick later.
			c.collect(dp)
		case <-ticker.C:
			if dp != nil {
				c.collect(dp)
			}
		}
	}
}

// adopt opens the pinned maps, or returns nil when there are none yet (a first start:
// Load creates them) or they are of another build (an upgrade: Load replaces them).
func (c *collector) adopt() *datapath.Datapath {
	dp, err := datapath.OpenPinned(c.pinDir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) && !c.waited {
			c.log.Info("datapath GC waits for the datapath load", "reason", err)
			c.waited = true
		}
		return nil
	}
	c.log.Info("datapath GC running on the pinned maps, before the apiserver is reached", "pinDir", c.pinDir)
	return dp
}

// collect runs one round of every datapath GC on dp. The single call site of the
// datapath's collectors: a new one (Service conntrack) goes next to GCNAT.
func (c *collector) collect(dp *datapath.Datapath) {
	c.round("nat-gc", "nat", "NAT entries", dp.GCNAT)
	// NodePort SNAT (BPF load balancing; its maps have one entry otherwise).
	c.round("nodeport-nat-gc", "nodeport-nat", "NodePort SNAT entries", dp.GCNodePortNAT)
	c.sampleEvictions(dp)
	// Service conntrack (BPF load balancing): the same clock, the same pass; then
	// the flows pinned to a backend that left their Service.
	c.round("service-ct-gc", "service-ct", "Service conntrack entries", func(now time.Duration) (int, error) {
		n, err := dp.GCServiceCT(now)
		ended, derr := c.endDeparted(dp)
		return n + ended, errors.Join(err, derr)
	})
	// NetworkPolicy's tracked connections that no close frees: idle UDP and other
	// non-TCP connections, TCP connections an RST ended.
	c.round("policy-ct-gc", "policy-ct", "NetworkPolicy connection entries", dp.GCPolicyCT)
	c.samplePolicyCTEvictions(dp)
}

// samplePolicyCTEvictions records the live connections pushed out of
// myelin_policy_ct so far, for status.
func (c *collector) samplePolicyCTEvictions(dp *datapath.Datapath) {
	if ev, err := dp.PolicyCTEvictions(); err == nil {
		c.policyCTEvictions.add(time.Now(), ev.InUse)
	}
}

// policyCTEvicted is how many live connections were pushed out of
// myelin_policy_ct in the last evictionWindow (dp's count now against the
// samples).
func (c *collector) policyCTEvicted(dp *datapath.Datapath) (uint64, error) {
	ev, err := dp.PolicyCTEvictions()
	if err != nil {
		return 0, err
	}
	return c.policyCTEvictions.since(time.Now(), ev.InUse), nil
}

// serviceFlowEnder is the part of *datapath.Datapath endDeparted uses.
type serviceFlowEnder interface {
	EndServiceFlows(pairs map[datapath.ServiceBackend]bool) (int, error)
}

// endDeparted deletes the Service conntrack entries of the flows whose backend left
// their frontend while other frontends keep it (service.Manager.Departed), so their
// next packet chooses a current backend of their own Service, and then forgets
// those departures. One walk of the tables, only when there are departures; on an
// error they stay for the next round.
func (c *collector) endDeparted(dp serviceFlowEnder) (int, error) {
	m := c.services.Load()
	if m == nil {
		return 0, nil
	}
	ds := m.Departed()
	if len(ds) == 0 {
		return 0, nil
	}
	pairs := make(map[datapath.ServiceBackend]bool, len(ds))
	for _, d := range ds {
		pairs[d.IDs] = true
	}
	n, err := dp.EndServiceFlows(pairs)
	if err != nil {
		return n, fmt.Errorf("end the flows of %d backends that left their Service: %w", len(ds), err)
	}
	m.Forget(ds)
	return n, nil
}

// round runs one datapath collector at the monotonic clock's now, reports the run as
// the loop named loop, counts what it removed under table for metrics, and logs what
// (the entries it collects) on an error and on removals.
func (c *collector) round(loop, table, what string, gc func(now time.Duration) (int, error)) {
	n, err := gc(datapath.MonotonicNow())
	c.loops.report(loop, err)
	c.stats.add(table, n)
	if err != nil {
		c.log.Warn("collect "+what, "err", err)
	}
	if n > 0 {
		c.log.Debug(what+" collected", "removed", n)
	}
}
