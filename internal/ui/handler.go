package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"time"

	"github.com/myelin-net/myelin/internal/connlimit"
	"github.com/myelin-net/myelin/internal/flow"
)

//go:embed web
var web embed.FS

// Handler serves the service map over one flow.Source:
//
//	/            the page (query: keep, window, namespace; see ParseParams)
//	/ui/...      its script and style sheet
//	/api/flows   the page's flows as server-sent events (same query)
//	/healthz     "ok" (a probe's target)
type Handler struct {
	src     flow.Source
	mux     *http.ServeMux
	hosts   *hostCheck
	streams *connlimit.Bound // open /api/flows streams
	// stallTimeout ends a stream whose page takes no write for this long.
	stallTimeout time.Duration
}

// AllowHosts adds the host names ("name", any port) or host:port values the page may
// be reached by, besides localhost, 127.0.0.1 and [::1]; requests naming another Host
// (or Origin) are refused, against DNS rebinding.
func (h *Handler) AllowHosts(hosts ...string) { h.hosts.add(hosts...) }

// New returns the handler for src. It answers only requests whose Host is a loopback
// name or one given to AllowHosts.
func New(src flow.Source) *Handler {
	h := &Handler{src: src, mux: http.NewServeMux(), hosts: newHostCheck(),
		streams: connlimit.New(streamsPerSource, streamsInAll), stallTimeout: stallTimeout}
	static, err := fs.Sub(web, "web")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	h.mux.HandleFunc("GET /{$}", h.page)
	h.mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(static)))
	h.mux.HandleFunc("GET /api/flows", h.flows)
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if h.hosts.reject(w, r) {
		return
	}
	h.mux.ServeHTTP(w, r)
}

// page serves index.html once its query is valid, so a mistyped parameter is an
// error page, not a page that silently shows something else.
func (h *Handler) page(w http.ResponseWriter, r *http.Request) {
	if _, err := ParseParams(r.URL.Query()); err != nil {
		http.Error(w, "myelin ui: "+err.Error(), http.StatusBadRequest)
		return
	}
	b, err := web.ReadFile("web/index.html")
	if err != nil {
		http.Error(w, "read the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'")
	w.Write(b)
}
