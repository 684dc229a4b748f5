package agent

import (
	"context"
	"net/http"

	"github.com/myelin-net/myelin/internal/api"
)

// Readiness: the agent serves its API as soon as its endpoints are restored (status,
// endpoint lists and CNI DEL work from then on), but reports ready (GET /healthz,
// which the CNI plugin's STATUS and the lab wait for) and accepts CNI ADD only once
// the node's datapath is complete: endpoints restored and, with
// kube-proxy-replacement, every Service programmed (the Service watcher's informer
// caches synced and its first full pass done). A pod started earlier could send to a
// Service the datapath does not know yet.

// notReadyStarting is the health reason until becomeReady names what it waits for.
const notReadyStarting = "starting"

// becomeReady marks the agent ready once servicesSynced is closed (at once when it is
// nil). Endpoints are restored before it is called. It returns false if ctx ended first.
func (a *server) becomeReady(ctx context.Context, servicesSynced <-chan struct{}) bool {
	if servicesSynced != nil {
		reason := "waiting for the first Service sync (informer caches and every Service programmed)"
		a.notReady.Store(&reason)
		select {
		case <-ctx.Done():
			return false
		case <-servicesSynced:
		}
	}
	a.ready.Store(true)
	return true
}

// notReadyReason says what the agent is waiting for.
func (a *server) notReadyReason() string {
	if r := a.notReady.Load(); r != nil {
		return *r
	}
	return notReadyStarting
}

func (a *server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if !a.ready.Load() {
		writeJSON(w, http.StatusServiceUnavailable, api.Health{Reason: a.notReadyReason()})
		return
	}
	writeJSON(w, http.StatusOK, api.Health{Ready: true})
}
