package flowclient

import (
	"encoding/json"
	"net/http"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/flow"
)

// ServeFlows answers GET /v1/flows from src: the flows the query (ParseQuery) asks
// for as JSON lines (flow.Flow), stored part first and, with follow, new flows until
// the client goes away. A malformed query is a 400 naming the filter.
func ServeFlows(w http.ResponseWriter, r *http.Request, src flow.Source) {
	req, err := ParseQuery(r.URL.Query())
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: err.Error()})
		return
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	out := make(chan *flow.Flow, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = src.Flows(r.Context(), req, out)
		close(out)
	}()
	enc := json.NewEncoder(w)
	for f := range out {
		if enc.Encode(f) != nil {
			break
		}
		if flusher != nil && len(out) == 0 {
			flusher.Flush()
		}
	}
	for range out { // the client went away: Flows ends with r's context
	}
	<-done
}
