package flowclient

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/flowstore"
)

// ServeFlows answers GET /v1/flows from src: the flows the query (ParseQuery) asks
// for as JSON lines (flow.Flow), stored part first and, with follow, new flows until
// the client goes away. A malformed query is a 400 naming the filter. The status is
// sent with the first flow, or when src returns without one: a request src refuses
// before sending anything is an error status with src's message (429 beyond
// flowstore.MaxFollowers), so a follow stream's headers wait for its first flow.
func ServeFlows(w http.ResponseWriter, r *http.Request, src flow.Source) {
	req, err := ParseQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	out := make(chan *flow.Flow, 64)
	done := make(chan struct{})
	var srcErr error
	go func() {
		defer close(done)
		srcErr = src.Flows(r.Context(), req, out)
		close(out)
	}()
	first, ok := <-out
	if !ok {
		<-done
		if srcErr != nil && r.Context().Err() == nil {
			writeError(w, sourceStatus(srcErr), srcErr)
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	if ok {
		streamFlows(w, first, out)
	}
	<-done
}

// streamFlows writes first and the rest of out as JSON lines, flushing whenever out
// is empty, until out is closed; when the client goes away it drains out (the source
// ends with the request's context).
func streamFlows(w http.ResponseWriter, first *flow.Flow, out <-chan *flow.Flow) {
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	for f, ok := first, true; ok; f, ok = <-out {
		if enc.Encode(f) != nil {
			break
		}
		if flusher != nil && len(out) == 0 {
			flusher.Flush()
		}
	}
	for range out {
	}
}

// sourceStatus is the HTTP status for a source's refusal: the client's filters (400),
// too many follow streams or readers of stored flows (429, gRPC's ResourceExhausted),
// else 500.
func sourceStatus(err error) int {
	switch {
	case errors.Is(err, flow.ErrInvalidFilter):
		return http.StatusBadRequest
	case errors.Is(err, flowstore.ErrTooManyFollowers), errors.Is(err, flowstore.ErrTooManyReaders):
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

func writeError(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: err.Error()})
}
