package healthcheck

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"

	"github.com/myelin-net/myelin/internal/service"
)

// body is kube-proxy's health check answer, field for field.
type body struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

// response is the answer of hc's port: 200 when the node has local endpoints and the
// service proxy (myelin's Service watcher) is healthy, 503 otherwise; a JSON body
// naming the Service and the count either way.
func response(hc service.HealthCheck, proxyHealthy bool) (int, []byte) {
	var b body
	b.Service.Namespace, b.Service.Name = hc.Namespace, hc.Name
	b.LocalEndpoints, b.ServiceProxyHealthy = hc.LocalEndpoints, proxyHealthy
	out, _ := json.Marshal(b) // cannot fail: strings, an int and a bool
	if hc.LocalEndpoints > 0 && proxyHealthy {
		return http.StatusOK, out
	}
	return http.StatusServiceUnavailable, out
}

// writeResponse writes the answer with kube-proxy's headers.
func writeResponse(w http.ResponseWriter, hc service.HealthCheck, proxyHealthy bool) {
	code, b := response(hc, proxyHealthy)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(hc.LocalEndpoints))
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// portOwners maps each wanted port to the Service (namespace/name) it answers for.
// The apiserver allocates every healthCheckNodePort once, so two Services never share
// one; if they did (a stale cache), the first key in order wins, the same on every run.
func portOwners(services map[string]service.HealthCheck) map[uint16]string {
	keys := make([]string, 0, len(services))
	for k := range services {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := map[uint16]string{}
	for _, k := range keys {
		if p := services[k].Port; p != 0 {
			if _, taken := out[p]; !taken {
				out[p] = k
			}
		}
	}
	return out
}
