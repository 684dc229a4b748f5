package agent

import (
	"io"
	"sync"

	"github.com/myelin-net/myelin/internal/api"
)

// A view is one part of the agent as the API shows it. A part registers its view
// with the server (viewSet.add) once it is ready, and the API serves what is
// registered: the server knows no part by name, and a part that is not ready yet is
// absent rather than half-built. The views and their status sections are in
// status.go.
type view interface {
	// fillStatus fills the part's own fields of GET /v1/status.
	fillStatus(s *api.Status)
}

// configSource is a view that also answers GET /v1/config.
type configSource interface {
	view
	configView() api.ConfigView
}

// serviceSource is a view that also answers GET /v1/services.
type serviceSource interface {
	view
	writeServicesView(w io.Writer) error
}

// viewSet is the views registered so far. Status is filled in registration order,
// so a view registered later may refine a field an earlier one set (kube-proxy:
// "starting" from the plan, then what the Services loop serves).
type viewSet struct {
	mu    sync.RWMutex
	views []view
}

// add registers views; they are served from now on.
func (v *viewSet) add(views ...view) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.views = append(v.views, views...)
}

// fillStatus fills s from every registered view.
func (v *viewSet) fillStatus(s *api.Status) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, w := range v.views {
		w.fillStatus(s)
	}
}

// findView returns the last registered view that is a T.
func findView[T view](v *viewSet) (T, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for i := len(v.views) - 1; i >= 0; i-- {
		if t, ok := v.views[i].(T); ok {
			return t, true
		}
	}
	var zero T
	return zero, false
}
