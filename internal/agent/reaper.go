package agent

import (
	"context"
	"log/slog"

	"github.com/myelin-net/myelin/internal/endpoint"
)

// vethReaper runs the endpoint manager's Reaper as the loop "veth-reaper": it deletes
// the host veths of deleted pods after CNI DEL has answered, and retries a delete that
// failed (endpoint/reaper.go). Each attempt is a run of the loop and each failed
// delete an error of it (myelin_controller_errors_total{controller="veth-reaper"});
// myelin_retired_veths counts the veths still waiting.
type vethReaper struct {
	reaper *endpoint.Reaper
	loops  *loops
	log    *slog.Logger
}

// Run implements runner.
func (v vethReaper) Run(ctx context.Context) {
	v.reaper.Run(ctx, v.report)
}

// report records and logs one attempt.
func (v vethReaper) report(a endpoint.Attempt) {
	v.loops.report("veth-reaper", a.Err)
	switch a.Outcome {
	case endpoint.Failed:
		v.log.Error("delete the host veth of a deleted pod; retrying", "veth", a.Name, "ifindex", a.Index,
			"err", a.Err, "failures", a.Failures, "retryIn", a.RetryIn)
	case endpoint.Kept:
		v.log.Info("retired host veth kept: an endpoint or a CNI ADD in progress owns it", "veth", a.Name, "ifindex", a.Index)
	}
}
