package ui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHostCheck: a request naming a host the server was not given (a DNS-rebound
// attacker's name) is refused, on every path; loopback names, the allowed names and
// host:port values pass.
func TestHostCheck(t *testing.T) {
	h := New(&fakeSource{})
	h.AllowHosts("myelin-ui", "ui.example.org:8080", "0.0.0.0:12000")
	cases := []struct {
		host, origin string
		want         int
	}{
		{"127.0.0.1:12000", "", http.StatusOK},
		{"localhost:12000", "", http.StatusOK},
		{"LOCALHOST", "", http.StatusOK},
		{"[::1]:12000", "", http.StatusOK},
		{"myelin-ui", "", http.StatusOK},
		{"myelin-ui:80", "", http.StatusOK},
		{"ui.example.org:8080", "", http.StatusOK},
		{"0.0.0.0:12000", "", http.StatusOK},
		{"127.0.0.1:12000", "http://127.0.0.1:12000", http.StatusOK},
		{"evil.example.com:12000", "", http.StatusForbidden},
		{"evil.example.com", "", http.StatusForbidden},
		{"ui.example.org:9090", "", http.StatusForbidden},
		{"127.0.0.2:12000", "", http.StatusForbidden},
		{"", "", http.StatusForbidden},
		{"127.0.0.1:12000", "http://evil.example.com:12000", http.StatusForbidden},
		{"127.0.0.1:12000", "null", http.StatusForbidden},
	}
	for _, path := range []string{"/healthz", "/api/flows?keep=1", "/"} {
		for _, c := range cases {
			if strings.HasPrefix(path, "/api/") && c.want == http.StatusOK {
				continue // a stream that stays open; the status is checked on the other paths
			}
			r := httptest.NewRequest("GET", path, nil)
			r.Host = c.host
			if c.origin != "" {
				r.Header.Set("Origin", c.origin)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.want {
				t.Errorf("GET %s Host %q Origin %q: status %d, want %d (%s)", path, c.host, c.origin, w.Code, c.want, w.Body)
			}
			if c.want == http.StatusForbidden && !strings.Contains(w.Body.String(), "--allowed-host") {
				t.Errorf("GET %s Host %q: refusal %q does not say how to allow a host", path, c.host, w.Body)
			}
		}
	}
}
