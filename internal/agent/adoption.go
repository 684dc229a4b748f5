package agent

import (
	"context"
	"log/slog"
	"time"
)

// adoptionInterval is how often the endpoints Restore could not program are tried
// again.
const adoptionInterval = 5 * time.Second

// adopter is what adoptionLoop needs of the endpoint manager.
type adopter interface {
	RetryAdoption() (int, error)
	Unadopted() int
}

// adoptionLoop programs again, every adoptionInterval, the endpoints the restore at
// start could not (a netlink or attach failure): their veths may still run the last
// agent's programs, which read maps this agent's Load may have replaced, and nothing
// else would touch them until their pod goes. It reports as the restore did
// ("endpoint-restore"), so status shows the failure until it is repaired, and is idle
// once none is left.
type adoptionLoop struct {
	eps      adopter
	interval time.Duration
	loops    *loops
	log      *slog.Logger
}

func (a adoptionLoop) Run(ctx context.Context) {
	ticker := time.NewTicker(a.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if a.eps.Unadopted() == 0 {
			continue
		}
		left, err := a.eps.RetryAdoption()
		a.loops.report("endpoint-restore", err)
		if err != nil {
			a.log.Error("adopt restored endpoints", "left", left, "err", err)
		} else {
			a.log.Info("restored endpoints adopted on retry")
		}
	}
}
