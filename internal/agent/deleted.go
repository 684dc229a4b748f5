package agent

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/myelin-net/myelin/internal/api"
)

// deletedInterval is how often the agent looks for deletes CNI DEL recorded while it
// could not reach the agent (down, hung or starting). Reading an empty directory is
// all it costs.
const deletedInterval = 5 * time.Second

// processDeleted carries out the deletes CNI DEL recorded in api.DeletedDir: the pod's
// veth is gone already; its endpoint is removed and its IP released, if the record is
// still the attachment DEL saw (endpoint.Manager.DeleteRecorded). A record is kept for
// the next round only when carrying it out failed.
func (a *agent) processDeleted() error {
	recs, err := api.ReadDeleted(api.DeletedDir(a.cfg.socket()))
	errs := []error{err}
	for path, d := range recs {
		removed, err := a.eps.DeleteRecorded(d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if removed {
			a.log.Info("endpoint deleted by a CNI DEL made while the agent was unreachable",
				"pod", d.Namespace+"/"+d.Pod, "container", d.ContainerID, "deleted", d.Deleted)
		}
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// watchDeleted runs processDeleted every deletedInterval until ctx ends, so deletes
// recorded while the agent was hung (not restarted) are carried out too.
func (a *agent) watchDeleted(ctx context.Context) {
	ticker := time.NewTicker(deletedInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		a.carryOutDeleted()
	}
}

// carryOutDeleted runs processDeleted and reports the outcome as the loop "cni-deleted".
func (a *agent) carryOutDeleted() {
	err := a.processDeleted()
	a.loops.report("cni-deleted", err)
	if err != nil {
		a.log.Error("carry out recorded CNI deletes", "err", err)
	}
}
