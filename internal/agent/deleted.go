package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/endpoint"
	"github.com/myelin-net/myelin/internal/statefile"
)

// deletedInterval is how often the agent looks for deletes CNI DEL recorded while it
// could not reach the agent (down, hung or starting). Reading an empty directory is
// all it costs.
const deletedInterval = 5 * time.Second

// deletedTempAge is the age past which a temporary file in the recorded-deletes
// directory is a crashed plugin's (statefile.Write's take milliseconds).
const deletedTempAge = 5 * time.Minute

// deletedLoop carries out the deletes CNI DEL recorded while no agent answered: once
// at start-up, before anything new is added, then every deletedInterval (loop
// "cni-deleted").
type deletedLoop struct {
	socket string
	eps    *endpoint.Manager
	loops  *loops
	log    *slog.Logger
}

// processDeleted carries out the deletes CNI DEL recorded in api.DeletedDir: the pod's
// veth is gone already; its endpoint is removed and its IP released, if the record is
// still the attachment DEL saw (endpoint.Manager.DeleteRecorded). Each record is
// claimed before it is read (api.ClaimDeleted), so a new record the plugin writes for
// the same container meanwhile is not removed with it. A claimed record is kept for
// the next round only when carrying it out failed.
func (d *deletedLoop) processDeleted() error {
	dir := api.DeletedDir(d.socket)
	recs, err := api.ClaimDeleted(dir)
	// The plugin may be writing a record now: only a crash's leftovers go.
	errs := []error{err, statefile.RemoveTemporaryOlder(dir, deletedTempAge)}
	for path, rec := range recs {
		removed, err := d.eps.DeleteRecorded(rec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if removed {
			d.log.Info("endpoint deleted by a CNI DEL made while the agent was unreachable",
				"pod", rec.Namespace+"/"+rec.Pod, "container", rec.ContainerID, "deleted", rec.Deleted)
		}
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Run carries out recorded deletes every deletedInterval until ctx ends, so deletes
// recorded while the agent was hung (not restarted) are carried out too.
func (d *deletedLoop) Run(ctx context.Context) {
	ticker := time.NewTicker(deletedInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		d.carryOut()
	}
}

// carryOut runs processDeleted and reports the outcome as the loop "cni-deleted".
func (d *deletedLoop) carryOut() {
	err := d.processDeleted()
	d.loops.report("cni-deleted", err)
	if err != nil {
		d.log.Error("carry out recorded CNI deletes", "err", err)
	}
}
