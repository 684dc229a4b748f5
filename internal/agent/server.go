package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/endpoint"
	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/ipam"
)

// server answers the agent's API on its unix socket. It is built once the endpoints
// are restored and owns what the CNI plugin talks to (endpoints, IPAM, their checks)
// and the monitor streams; every other part of the agent is served through the view
// it registers once it is ready (views.go), so a handler sees a part either absent
// ("starting") or complete.
type server struct {
	cfg Config
	log *slog.Logger

	dp      *datapath.Datapath // for endpoint checks
	eps     *endpoint.Manager
	pool    *ipam.Pool
	monitor *monitor
	flows   flow.Source // the node's flow store (flowsapi.go)
	views   viewSet

	ready    atomic.Bool
	notReady atomic.Pointer[string] // what the agent waits for before it is ready
}

func newServer(cfg Config, node *nodeDatapath, log *slog.Logger) *server {
	s := &server{cfg: cfg, log: log, dp: node.dp, eps: node.eps, pool: node.pool, monitor: newMonitor(node.dp, node.eps, log)}
	if node.flows != nil {
		s.flows = node.flows
	}
	return s
}

// serve starts the local API on the agent's unix socket.
func (a *server) serve() (*http.Server, error) {
	l, err := listenUnixPrivate(a.cfg.socket())
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", a.handleHealth)
	mux.HandleFunc("POST /v1/ipam/{id}", a.ifReady(a.handleAllocate))
	// Deletes need no readiness: the server starts after the endpoints are restored, and
	// a pod deleted while the agent waits for its Services must not wait for them.
	mux.HandleFunc("DELETE /v1/ipam/{id}", a.handleRelease)
	mux.HandleFunc("GET /v1/endpoints", a.handleListEndpoints)
	mux.HandleFunc("GET /v1/endpoints/{id}", a.handleGetEndpoint)
	mux.HandleFunc("GET /v1/endpoints/{id}/check", a.handleCheckEndpoint)
	mux.HandleFunc("PUT /v1/endpoints/{id}", a.ifReady(a.handlePutEndpoint))
	mux.HandleFunc("DELETE /v1/endpoints/{id}", a.handleDeleteEndpoint)
	mux.HandleFunc("POST /v1/gc", a.ifReady(a.handleGC))
	mux.HandleFunc("GET /v1/status", a.handleStatus)
	mux.HandleFunc("GET /v1/config", a.handleConfig)
	mux.HandleFunc("GET /v1/services", a.handleServices)
	mux.HandleFunc("GET /v1/policy", a.handlePolicy)            // policyapi.go
	mux.HandleFunc("GET /v1/policy/trace", a.handlePolicyTrace) // policyapi.go
	mux.HandleFunc("GET /v1/monitor", a.handleMonitor)
	mux.HandleFunc("GET /v1/flows", a.handleFlows)         // flowsapi.go
	mux.HandleFunc("GET /v1/health", a.handleHealthMatrix) // peerhealth.go
	registerPprof(mux)                                     // pprof.go
	// Long-lived answers (monitor, flows) stream, so no write timeout; a client that
	// never finishes its request headers is dropped.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("API server", "err", err)
		}
	}()
	return srv, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, api.ErrorBody{Error: err.Error()})
}

// writeRetry answers a refusal that passes by itself (api.ErrRetry for the client).
func writeRetry(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, api.ErrorBody{Error: err.Error(), Retry: true})
}

// ifReady answers 503 until the agent has finished starting.
func (a *server) ifReady(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.ready.Load() {
			writeError(w, http.StatusServiceUnavailable, fmt.Errorf("agent on node %s is not ready: %s", a.cfg.Node, a.notReadyReason()))
			return
		}
		h(w, r)
	}
}

// maxRequestBody bounds a request body of the API (a pod reference or an endpoint:
// a few hundred bytes), so no client can make a handler read without end.
const maxRequestBody = 64 << 10

// maxGCBody bounds a CNI GC's body, the container ids of every attachment the runtime
// keeps: ~70 bytes each, so 64 KiB would refuse a node past ~900 pods, and the GC
// would never run there.
const maxGCBody = 8 << 20

func decode(r *http.Request, v any) error { return decodeAtMost(r, v, maxRequestBody) }

func decodeAtMost(r *http.Request, v any, limit int64) error {
	if err := json.NewDecoder(io.LimitReader(r.Body, limit)).Decode(v); err != nil {
		return fmt.Errorf("bad request body (a JSON object of at most %d bytes): %w", limit, err)
	}
	return nil
}

// containerID is the request path's container id, or false after answering 400 for
// one that is not a CNI container id (the agent names files by it).
func containerID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if err := api.CheckContainerID(id); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return "", false
	}
	return id, true
}

func (a *server) handleAllocate(w http.ResponseWriter, r *http.Request) {
	id, ok := containerID(w, r)
	if !ok {
		return
	}
	var ref api.PodRef
	if err := decode(r, &ref); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	ref.ContainerID = id
	// IPAM passes over addresses Pods being deleted still list, known once the policy
	// loop's Pod cache synced (podclaims.go); the PUT that follows waits for it anyway.
	if pol, ok := findView[*policyLoop](&a.views); ok {
		if err := pol.awaitAllocatable(r.Context(), ref); err != nil {
			writeRetry(w, http.StatusServiceUnavailable, err)
			return
		}
	}
	alloc, err := a.eps.Allocate(ref)
	if errors.Is(err, ipam.ErrClaimed) { // free once the Pods being deleted are gone
		writeRetry(w, http.StatusConflict, err)
		return
	}
	if err != nil {
		writeError(w, http.StatusConflict, err)
		return
	}
	writeJSON(w, http.StatusOK, alloc)
}

// handleRelease gives back a failed ADD's IP (?attempt= names the ADD); a container
// with a live endpoint keeps it (409): only DEL removes an attachment; one with
// another ADD in flight keeps it too (204).
func (a *server) handleRelease(w http.ResponseWriter, r *http.Request) {
	id, ok := containerID(w, r)
	if !ok {
		return
	}
	if err := a.eps.Release(id, r.URL.Query().Get("attempt")); err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, endpoint.ErrEndpointExists) {
			code = http.StatusConflict
		}
		writeError(w, code, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *server) handleListEndpoints(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.eps.List())
}

func (a *server) handleGetEndpoint(w http.ResponseWriter, r *http.Request) {
	ep, ok := a.eps.Get(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("no endpoint for container %s on node %s", r.PathValue("id"), a.cfg.Node))
		return
	}
	writeJSON(w, http.StatusOK, ep)
}

func (a *server) handlePutEndpoint(w http.ResponseWriter, r *http.Request) {
	id, ok := containerID(w, r)
	if !ok {
		return
	}
	var ep api.Endpoint
	if err := decode(r, &ep); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	ep.ContainerID = id
	// The pod runs once ADD returns: its NetworkPolicy first (policyadmit.go). The
	// agent always enforces NetworkPolicy, and its policy loop is registered before
	// it is ready; without it a pod would run unisolated, so it is refused (503: the
	// plugin's ADD fails with "try again later") rather than admitted.
	pol, ok := findView[*policyLoop](&a.views)
	if !ok {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("pod %s/%s (container %s): the agent on node %s has not started "+
			"NetworkPolicy enforcement yet, so the pod's policy can't be put in place; retry", ep.Namespace, ep.Pod, id, a.cfg.Node))
		return
	}
	out, err := a.eps.Put(ep)
	if err != nil {
		writeError(w, http.StatusConflict, err)
		return
	}
	if err := pol.admit(r.Context(), out); err != nil {
		if derr := a.eps.DeleteOwned(out.ContainerID, out.HostIfIndex); derr != nil {
			err = fmt.Errorf("%w (and removing the endpoint again failed: %v)", err, derr)
		}
		a.log.Error("endpoint not admitted", "pod", ep.Namespace+"/"+ep.Pod, "ip", ep.IP, "err", err)
		writeError(w, http.StatusGatewayTimeout, err) // api.ErrNotAdmitted: the agent is up
		return
	}
	a.log.Info("endpoint added", "pod", ep.Namespace+"/"+ep.Pod, "ip", ep.IP, "veth", ep.HostIfName)
	writeJSON(w, http.StatusOK, out)
}

// handleDeleteEndpoint deletes an endpoint; ?ifindex= names the host veth the caller
// saw, and a record on another veth is not deleted (412, api.ErrNotOwner).
func (a *server) handleDeleteEndpoint(w http.ResponseWriter, r *http.Request) {
	id, ok := containerID(w, r)
	if !ok {
		return
	}
	ifindex := 0
	if s := r.URL.Query().Get("ifindex"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Errorf("ifindex %q is not an interface index", s))
			return
		}
		ifindex = n
	}
	ifName := r.URL.Query().Get("ifname")
	if ifName != "" {
		if err := api.CheckPodRef(api.PodRef{ContainerID: id, IfName: ifName}); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
	}
	if err := a.eps.DeleteAttachment(id, ifindex, ifName); err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, api.ErrNotOwner) {
			code = http.StatusPreconditionFailed
		}
		writeError(w, code, err)
		return
	}
	a.log.Info("endpoint deleted", "container", id)
	w.WriteHeader(http.StatusNoContent)
}

func (a *server) handleGC(w http.ResponseWriter, r *http.Request) {
	var req api.GCRequest
	if err := decodeAtMost(r, &req, maxGCBody); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	removed, err := a.eps.GC(req.Keep)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, api.GCResult{Removed: removed})
}

func (a *server) handleConfig(w http.ResponseWriter, _ *http.Request) {
	c, ok := findView[configSource](&a.views)
	if !ok {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("agent on node %s is starting", a.cfg.Node))
		return
	}
	writeJSON(w, http.StatusOK, c.configView())
}

func (a *server) handleServices(w http.ResponseWriter, _ *http.Request) {
	s, ok := findView[serviceSource](&a.views)
	if !ok {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("agent on node %s is starting", a.cfg.Node))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if err := s.writeServicesView(w); err != nil {
		a.log.Debug("write services view", "err", err) // the client went away
	}
}
