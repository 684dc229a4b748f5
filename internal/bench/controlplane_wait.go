package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/myelin-net/myelin/internal/api"
)

// waitAgentReady polls the node agent's health every 10 ms until it is ready and
// returns when it first saw it ready.
func waitAgentReady(ctx context.Context, node string) (time.Time, error) {
	c := api.NewClient(api.NodeSocket(node))
	for {
		h, err := c.Health(ctx)
		if err == nil && h.Ready {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for the agent of %s to be ready: %w (last error %v)", node, ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitAgentBackends waits until the node's agent, caught up with the API, has
// programmed more than programServices frontends and, on them, at least
// programServices*programBackends backends (the filler's), asking every poll.
func waitAgentBackends(ctx context.Context, node string, poll time.Duration) error {
	for {
		s, err := api.NewClient(api.NodeSocket(node)).Services(ctx)
		backends := 0
		for _, f := range s.Frontends {
			backends += len(f.Backends)
		}
		if err == nil && s.Synced && len(s.Frontends) > programServices && backends >= programServices*programBackends {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d Services of %d backends on the agent (have %d frontends, %d backends): %w (last error %v)",
				programServices, programBackends, len(s.Frontends), backends, ctx.Err(), err)
		case <-time.After(poll):
		}
	}
}
