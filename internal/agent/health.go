package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/myelin-net/myelin/internal/api"
)

// The health endpoint is what the kubelet probes when the agent runs as a DaemonSet
// pod: HTTP on 127.0.0.1:<--health-port> of the node's network namespace, served from
// the agent's first moment (before it waits for the apiserver), apart from the API
// socket.
//
//	GET /healthz  liveness: 200 while the process serves; the kubelet restarts an
//	              agent that stops answering (a hang), never one that only waits.
//	GET /readyz   readiness: 200 only once the agent is ready in the API socket's
//	              sense (server.becomeReady: endpoints restored, programs attached,
//	              the conflist installed and, with kube-proxy-replacement, every
//	              Service programmed); 503 with what it waits for until then.

// healthServer serves /healthz and /readyz; the API server is published to it once
// it exists, before which the agent is not ready.
type healthServer struct {
	srv   *http.Server
	ready atomic.Pointer[readinessSource]
}

// readinessSource says whether the agent is ready and, if not, what it waits for.
type readinessSource interface{ readiness() (bool, string) }

// readiness is the API server's readiness (readiness.go), for /readyz.
func (a *server) readiness() (bool, string) { return a.ready.Load(), a.notReadyReason() }

// startHealth listens on 127.0.0.1:port (port 0: no health endpoint, the lab's
// host-process agents) and serves until close.
func startHealth(port int, log *slog.Logger) (*healthServer, error) {
	h := &healthServer{}
	if port == 0 {
		return h, nil
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s for the health endpoint: %w; choose another port with --health-port (chart value healthPort)", addr, err)
	}
	h.serve(l, log)
	return h, nil
}

// serve answers the probes on l until close.
func (h *healthServer) serve(l net.Listener, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"alive": true})
	})
	mux.HandleFunc("GET /readyz", h.handleReady)
	h.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	go func() {
		if err := h.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("health endpoint", "err", err)
		}
	}()
}

// use publishes the API server (or any readinessSource) whose readiness /readyz reports.
func (h *healthServer) use(s readinessSource) { h.ready.Store(&s) }

func (h *healthServer) handleReady(w http.ResponseWriter, _ *http.Request) {
	src := h.ready.Load()
	if src == nil {
		writeJSON(w, http.StatusServiceUnavailable, api.Health{Reason: "starting: reading the Node and configuration, loading the datapath"})
		return
	}
	if ready, reason := (*src).readiness(); !ready {
		writeJSON(w, http.StatusServiceUnavailable, api.Health{Reason: reason})
		return
	}
	writeJSON(w, http.StatusOK, api.Health{Ready: true})
}

// close stops serving; the kubelet then sees the agent as gone, which it is.
func (h *healthServer) close() {
	if h.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
}
