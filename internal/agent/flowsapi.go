package agent

import (
	"fmt"
	"net/http"

	"github.com/myelin-net/myelin/internal/flowclient"
)

// handleFlows serves GET /v1/flows from the node's flow store (flowclient.ServeFlows:
// JSON lines, filters as query parameters, follow). The API is the node's own socket:
// its follow streams have flowstore.LocalFollowers of their own.
func (a *server) handleFlows(w http.ResponseWriter, r *http.Request) {
	if a.flows == nil {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("agent is starting"))
		return
	}
	flowclient.ServeFlows(w, r, localSource{a.flows})
}
