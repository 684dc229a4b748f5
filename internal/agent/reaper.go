package agent

import (
	"context"
	"log/slog"

	"github.com/myelin-net/myelin/internal/endpoint"
)

// vethReaper runs the endpoint manager's Reaper as the loop "veth-reaper": it deletes
// the host veths of deleted pods after CNI DEL has answered (endpoint/reaper.go).
type vethReaper struct {
	reaper *endpoint.Reaper
	loops  *loops
	log    *slog.Logger
}

// Run implements runner.
func (v vethReaper) Run(ctx context.Context) {
	v.reaper.Run(ctx, func(name string, err error) {
		v.loops.report("veth-reaper", err)
		if err != nil {
			v.log.Error("delete the host veth of a deleted pod", "veth", name, "err", err)
		}
	})
}
