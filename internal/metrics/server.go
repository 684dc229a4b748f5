package metrics

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/myelin-net/myelin/internal/connlimit"
)

// maxScrapes is how many scrapes one endpoint gathers at a time, and
// maxScrapesPerSource how many of them one source address may hold (host-network
// collectors of one node share its address); more get 503 at once. A scrape
// takes milliseconds (the map counts are shared, MapCache), so a Prometheus or
// two never meet them; a pod scraping over its 64 connections
// (connlimit.Clients) costs the agent at most four gathers at a time.
const (
	maxScrapes          = 8
	maxScrapesPerSource = 4
)

// maxAnswers is how many gathered answers one endpoint holds in memory while
// they are written, and maxAnswersPerSource how many of them one source address
// may hold; more get 503 at once. A client that stops reading holds one of them
// for scrapeWriteTimeout at most (Prometheus' own scrape timeout is 10 s).
const (
	maxAnswers          = 64
	maxAnswersPerSource = 8
	scrapeWriteTimeout  = 10 * time.Second
)

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
	mux.Handle("/metrics", scrapeHandler(promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}),
		connlimit.New(maxScrapesPerSource, maxScrapes), connlimit.New(maxAnswersPerSource, maxAnswers)))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: scrapeWriteTimeout,
		IdleTimeout: time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serve metrics", "endpoint", what, "addr", addr, "err", err)
		}
	}()
	log.Info("serving metrics", "endpoint", what, "addr", ln.Addr().String())
	return srv, nil
}

// scrapeHandler serves h's scrapes within places (per source address and in
// all; the others get 503 at once). A scrape holds its place only while h
// gathers and encodes it, into memory, and its answer one of answers while it
// is written after: a client that stops reading holds its connection and its
// answer (until scrapeWriteTimeout), not a place every scraper needs.
func scrapeHandler(h http.Handler, places, answers *connlimit.Bound) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		doneWriting, ok := answers.Take(r.RemoteAddr)
		if !ok {
			http.Error(w, fmt.Sprintf("too many answers being written (%d in all, %d to one address); read them, or scrape again later",
				maxAnswers, maxAnswersPerSource), http.StatusServiceUnavailable)
			return
		}
		defer doneWriting()
		release, ok := places.Take(r.RemoteAddr)
		if !ok {
			http.Error(w, fmt.Sprintf("too many scrapes at once (%d in all, %d from one address); scrape again later",
				maxScrapes, maxScrapesPerSource), http.StatusServiceUnavailable)
			return
		}
		var b bufferedResponse
		h.ServeHTTP(&b, r)
		release()
		maps.Copy(w.Header(), b.Header())
		w.Header().Set("Content-Length", strconv.Itoa(b.body.Len()))
		w.WriteHeader(cmp.Or(b.code, http.StatusOK))
		_, _ = w.Write(b.body.Bytes())
	})
}

// bufferedResponse is an http.ResponseWriter that keeps the answer in memory.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header {
	if b.header == nil {
		b.header = http.Header{}
	}
	return b.header
}

func (b *bufferedResponse) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}
