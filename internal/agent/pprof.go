package agent

import (
	"net/http"
	"net/http/pprof"
)

// registerPprof serves Go's runtime profiles under /debug/pprof/ on the agent socket
// (root only, like the rest of its API): `curl --unix-socket <socket>
// http://agent/debug/pprof/heap > heap.pprof`, then `go tool pprof`. `myelin scale`
// saves the heap profile of an agent with 50,000 pods (docs/scale.md).
func registerPprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
