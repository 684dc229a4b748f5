package clusterhealth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/myelin-net/myelin/internal/connlimit"
)

// Server answers other agents' probes: GET HelloPath with this node's Hello, on each
// of its addresses (the node IP and the health address) at cluster-health-port.
type Server struct {
	srv *http.Server
}

// Serve listens on every address at port and answers me until Close. A port that
// is taken is an error naming it and the key that sets it.
func Serve(me Hello, addrs []netip.Addr, port int, log *slog.Logger) (*Server, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+HelloPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(me)
	})
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: ProbeTimeout}}
	s.srv.SetKeepAlivesEnabled(false) // a probe holds its connection only while it runs (connlimit.Probes)
	var ls []net.Listener
	for _, a := range addrs {
		addr := net.JoinHostPort(a.String(), strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, fmt.Errorf("listen on %s for node health probes: %w; choose another port with cluster-health-port (chart value clusterHealthPort), or 0 to turn probing off", addr, err)
		}
		ls = append(ls, connlimit.Probes.Wrap(l, "node health probes (cluster-health-port)", log))
	}
	for _, l := range ls {
		go func() {
			if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("node health server", "addr", l.Addr().String(), "err", err)
			}
		}()
	}
	return s, nil
}

// Close stops answering.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}
