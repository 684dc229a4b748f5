package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/myelin-net/myelin/internal/connlimit"
)

// maxScrapes is how many scrapes one endpoint serves at a time; more get 503 at
// once. A scrape takes milliseconds (the map counts are shared, MapCache), so a
// Prometheus or two never meet it; a pod scraping over its 64 connections
// (connlimit.Clients) costs the agent at most this many gathers at a time.
const maxScrapes = 8

// Serve serves g's metrics on addr ("host:port" or ":port") at /metrics until
// Close; what names the endpoint in errors and the log (e.g. "prometheus-serve-addr").
// The listener is bound before Serve returns, so a port in use is an error here.
func Serve(addr, what string, g prometheus.Gatherer, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s %q: %w (set %s to a free address, or \"\" to turn it off)", what, addr, err, what)
	}
	ln = connlimit.Clients.Wrap(ln, "metrics ("+what+")", log)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), MaxRequestsInFlight: maxScrapes}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serve metrics", "endpoint", what, "addr", addr, "err", err)
		}
	}()
	log.Info("serving metrics", "endpoint", what, "addr", ln.Addr().String())
	return srv, nil
}
