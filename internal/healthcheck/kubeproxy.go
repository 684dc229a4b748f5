package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/myelin-net/myelin/internal/connlimit"
)

// ProxyMode is what GET /proxyMode answers: kube-proxy names its mode there
// (iptables, ipvs, nftables); myelin's Services are served by BPF.
const ProxyMode = "ebpf"

// KubeProxy answers what kube-proxy serves to load balancers and monitoring, for a
// node where myelin replaces it (kube-proxy-replacement): cloud load balancers probe
// every node's :10256/healthz for externalTrafficPolicy Cluster Services, and the
// upstream e2e suite checks both addresses.
//   - HealthzAddr (kube-proxy's --healthz-bind-address, 0.0.0.0:10256): GET /healthz
//     and /livez, 200 with kube-proxy's JSON once the Services are synced, 503 before.
//   - MetricsAddr (kube-proxy's --metrics-bind-address, 127.0.0.1:10249): GET
//     /proxyMode, which answers ProxyMode.
//
// An address "" is not served. One that can't be opened (kube-proxy still running on
// the node) is reported and tried again until ctx ends; it never stops the agent.
type KubeProxy struct {
	HealthzAddr, MetricsAddr string
	Synced                   func() bool // the Services are programmed
	Report                   func(error) // nil once every address is served
	Log                      *slog.Logger
}

// Run serves the addresses until ctx ends.
func (k KubeProxy) Run(ctx context.Context) {
	servers := map[string]*http.Server{}
	if k.HealthzAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", k.healthz)
		mux.HandleFunc("GET /livez", k.healthz)
		servers[k.HealthzAddr] = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	}
	if k.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /proxyMode", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = fmt.Fprint(w, ProxyMode)
		})
		servers[k.MetricsAddr] = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	}
	if len(servers) == 0 {
		return
	}
	for _, srv := range servers {
		srv.SetKeepAlivesEnabled(false) // a probe holds its connection only while it runs (connlimit.Probes)
	}
	pending := servers
	for {
		pending = k.listen(pending)
		if len(pending) == 0 {
			k.Report(nil)
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retryInterval):
		}
	}
	<-ctx.Done()
	for _, srv := range servers {
		_ = srv.Close()
	}
}

// listen starts a server for every address of pending it can open and returns the
// ones it could not, after reporting the first failure.
func (k KubeProxy) listen(pending map[string]*http.Server) map[string]*http.Server {
	left := map[string]*http.Server{}
	var errs []error
	for addr, srv := range pending {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("serve kube-proxy's %s: %w (is kube-proxy still running on this node? stop it, or set %s to \"\")",
				addr, err, keyOf(k, addr)))
			left[addr] = srv
			continue
		}
		k.Log.Info("serving kube-proxy's endpoints", "addr", addr)
		ln = connlimit.Probes.Wrap(ln, "kube-proxy's "+addr, k.Log)
		go func() { _ = srv.Serve(ln) }()
	}
	if len(errs) > 0 {
		k.Report(errors.Join(errs...))
	}
	return left
}

func keyOf(k KubeProxy, addr string) string {
	if addr == k.HealthzAddr {
		return "kube-proxy-replacement-healthz-bind-address"
	}
	return "kube-proxy-replacement-metrics-bind-address"
}

// healthz answers as kube-proxy's healthz server does: 200 and its JSON while the
// Services are synced (lastUpdated: now, since myelin programs each change as it
// comes instead of in periodic syncs), 503 with the same JSON before.
func (k KubeProxy) healthz(w http.ResponseWriter, _ *http.Request) {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	code, last := http.StatusOK, now
	if !k.Synced() {
		code, last = http.StatusServiceUnavailable, ""
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, `{"lastUpdated": %q,"currentTime": %q, "nodeEligible": true}`, last, now)
}
