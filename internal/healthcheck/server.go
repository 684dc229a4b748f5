package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/myelin-net/myelin/internal/connlimit"
	"github.com/myelin-net/myelin/internal/service"
)

// retryInterval is how often a port that could not be opened is tried again.
const retryInterval = 5 * time.Second

// Server is the control loop that owns the health check listeners: Update records
// what each Service needs, Run opens a listener for every wanted port and closes the
// ones no Service wants any more. Each request reads the Service's current state, so
// a changed endpoint count needs no listener change. Safe for concurrent use.
type Server struct {
	healthy func() bool // the service proxy's own health: false until Services are synced
	report  func(error) // the outcome of every reconcile that did something, for status
	log     *slog.Logger
	listen  func(port uint16) (net.Listener, error)

	mu       sync.Mutex
	services map[string]service.HealthCheck // by namespace/name
	owners   map[uint16]string              // port -> the Service it answers for
	kick     chan struct{}

	listeners map[uint16]*http.Server // Run's own
}

// New returns a Server listening on every address of the current network namespace
// (the node's). healthy says whether the Services are programmed (kube-proxy's
// serviceProxyHealthy); report gets every reconcile's outcome.
func New(healthy func() bool, report func(error), log *slog.Logger) *Server {
	return &Server{healthy: healthy, report: report, log: log, listen: listenAll,
		services: map[string]service.HealthCheck{}, owners: map[uint16]string{},
		kick: make(chan struct{}, 1), listeners: map[uint16]*http.Server{}}
}

func listenAll(port uint16) (net.Listener, error) {
	return net.Listen("tcp", ":"+strconv.Itoa(int(port)))
}

// Update records the health check of the Service key (namespace/name); nil removes it.
func (s *Server) Update(key string, hc *service.HealthCheck) {
	s.mu.Lock()
	old, had := s.services[key]
	if hc == nil {
		delete(s.services, key)
	} else {
		s.services[key] = *hc
	}
	portChanged := had != (hc != nil) || hc != nil && old.Port != hc.Port
	if portChanged {
		s.owners = portOwners(s.services)
	}
	s.mu.Unlock()
	if portChanged {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// Ports returns the ports the Server wants to listen on, by Service.
func (s *Server) Ports() map[uint16]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[uint16]string, len(s.owners))
	for p, k := range s.owners {
		out[p] = k
	}
	return out
}

// Run keeps the listeners equal to the wanted ports until ctx ends, then closes them.
func (s *Server) Run(ctx context.Context) {
	retry := time.NewTicker(retryInterval)
	defer retry.Stop()
	defer s.closeAll()
	for {
		changed, err := s.reconcile()
		if changed || err != nil {
			s.report(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-retry.C:
		}
	}
}

// reconcile closes the listeners of ports no Service wants and opens the missing
// ones. changed says whether it opened or closed any.
func (s *Server) reconcile() (changed bool, err error) {
	want := s.Ports()
	var errs []error
	for port, srv := range s.listeners {
		if _, ok := want[port]; !ok {
			_ = srv.Close()
			delete(s.listeners, port)
			s.log.Info("health check port closed", "port", port)
			changed = true
		}
	}
	for port, key := range want {
		if _, ok := s.listeners[port]; ok {
			continue
		}
		l, err := s.listen(port)
		if err != nil {
			errs = append(errs, fmt.Errorf("listen on healthCheckNodePort %d of Service %s: %w", port, key, err))
			continue
		}
		l = connlimit.Probes.Wrap(l, fmt.Sprintf("healthCheckNodePort %d (Service %s)", port, key), s.log)
		srv := &http.Server{Handler: s.handler(port), ReadHeaderTimeout: 5 * time.Second}
		srv.SetKeepAlivesEnabled(false) // a probe holds its connection only while it runs (connlimit.Probes)
		s.listeners[port] = srv
		go func() { _ = srv.Serve(l) }()
		s.log.Info("health check port open", "port", port, "service", key)
		changed = true
	}
	if len(errs) > 0 {
		err = errors.Join(errs...)
		s.log.Error("open health check ports", "err", err)
	}
	return changed, err
}

// handler answers any path on port with the current state of the Service that owns it.
func (s *Server) handler(port uint16) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		hc, ok := s.services[s.owners[port]]
		s.mu.Unlock()
		if !ok {
			// Between the Service's removal and the listener's close.
			http.Error(w, "no Service uses this health check port", http.StatusServiceUnavailable)
			return
		}
		writeResponse(w, hc, s.healthy())
	})
}

func (s *Server) closeAll() {
	for port, srv := range s.listeners {
		_ = srv.Close()
		delete(s.listeners, port)
	}
}
