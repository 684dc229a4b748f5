package metrics

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/myelin-net/myelin/internal/connlimit"
)

// stalledWriter is a client that stopped reading: its first Write says so on
// writing and then blocks until release closes.
type stalledWriter struct {
	header  http.Header
	writing chan<- struct{}
	release <-chan struct{}
}

func (s *stalledWriter) Header() http.Header { return s.header }
func (s *stalledWriter) WriteHeader(int)     {}
func (s *stalledWriter) Write(p []byte) (int, error) {
	s.writing <- struct{}{}
	<-s.release
	return len(p), nil
}

func scrape(h http.Handler, remote string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// stallAnswers makes n scrapes of h from remote(i) whose clients stop reading,
// each blocked in its write when it returns; done lets them finish and waits.
func stallAnswers(h http.Handler, n int, remote func(i int) string) (done func()) {
	writing, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			r.RemoteAddr = remote(i)
			h.ServeHTTP(&stalledWriter{header: http.Header{}, writing: writing, release: release}, r)
		}()
		<-writing
	}
	return func() { close(release); wg.Wait() }
}

// Clients that stop reading their answers hold no scrape place: with as many
// of them as there are places, each blocked in its write, a scraper still
// gets its answer.
func TestScrapeStalledReadersHoldNoPlace(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "myelin_test_up", Help: "test"}))
	h := scrapeHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), connlimit.New(maxScrapesPerSource, maxScrapes),
		connlimit.New(maxAnswersPerSource, maxAnswers))
	done := stallAnswers(h, maxScrapes, func(i int) string { return fmt.Sprintf("10.0.0.%d:40000", i+1) })
	w := scrape(h, "10.0.1.1:40000")
	done()
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "myelin_test_up 0") {
		t.Errorf("a scrape beside %d stalled readers: %d %q, want 200 with the metric", maxScrapes, w.Code, w.Body.String())
	}
}

// One source address holds at most maxAnswersPerSource answers being written:
// its next scrape gets 503 naming the bound, and what it holds is freed when a
// write ends.
func TestScrapeAnswersPerSource(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := scrapeHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), connlimit.New(maxScrapesPerSource, maxScrapes),
		connlimit.New(maxAnswersPerSource, maxAnswers))
	done := stallAnswers(h, maxAnswersPerSource, func(int) string { return "10.0.0.1:40000" })
	w := scrape(h, "10.0.0.1:40001")
	done()
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "to one address") {
		t.Errorf("a scrape beside %d unread answers to its address: %d %q, want 503 naming the bound", maxAnswersPerSource, w.Code, w.Body.String())
	}
	if w := scrape(h, "10.0.0.1:40002"); w.Code != http.StatusOK || w.Header().Get("Content-Length") != strconv.Itoa(w.Body.Len()) {
		t.Errorf("a scrape once those were written: %d, Content-Length %q for %d bytes, want 200 with the length", w.Code, w.Header().Get("Content-Length"), w.Body.Len())
	}
}

// blockingGatherer blocks its first n Gathers until release closes, telling gathering.
type blockingGatherer struct {
	mu        sync.Mutex
	n         int
	gathering chan<- struct{}
	release   <-chan struct{}
}

func (g *blockingGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.mu.Lock()
	block := g.n > 0
	g.n--
	g.mu.Unlock()
	if block {
		g.gathering <- struct{}{}
		<-g.release
	}
	return nil, nil
}

// One source address holds at most maxScrapesPerSource gathers at a time; the
// next one from it gets 503 naming the bound, another source is served.
func TestScrapePerSource(t *testing.T) {
	gathering, release := make(chan struct{}), make(chan struct{})
	g := &blockingGatherer{n: maxScrapesPerSource, gathering: gathering, release: release}
	h := scrapeHandler(promhttp.HandlerFor(g, promhttp.HandlerOpts{}), connlimit.New(maxScrapesPerSource, maxScrapes),
		connlimit.New(maxAnswersPerSource, maxAnswers))
	var wg sync.WaitGroup
	for range maxScrapesPerSource {
		wg.Add(1)
		go func() { defer wg.Done(); scrape(h, "10.0.0.1:40000") }()
		<-gathering
	}
	same, other := scrape(h, "10.0.0.1:40001"), scrape(h, "10.0.0.2:40000")
	close(release)
	wg.Wait()
	if same.Code != http.StatusServiceUnavailable || !strings.Contains(same.Body.String(), "from one address") {
		t.Errorf("scrape %d from one address: %d %q, want 503 naming the bound", maxScrapesPerSource+1, same.Code, same.Body.String())
	}
	if other.Code != http.StatusOK {
		t.Errorf("scrape from another address meanwhile: %d %q, want 200", other.Code, other.Body.String())
	}
}
