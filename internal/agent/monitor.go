package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/endpoint"
	"github.com/myelin-net/myelin/internal/flow"
)

// subscriberBuffer is how many events a slow monitor client may fall behind before
// events are counted as lost for it.
const subscriberBuffer = 4096

// monitor reads the datapath's ring buffer once and fans events out to the API's
// monitor streams. Drop and trace events are switched on in the datapath only while
// a client asks for them: with no client a packet costs its counter and no event.
type monitor struct {
	dp    *datapath.Datapath
	flags eventSwitch // dp, or a fake in tests
	eps   *endpoint.Manager
	log   *slog.Logger

	mu   sync.Mutex
	subs map[*subscriber]bool
	// names names addresses that are no local endpoint (the policy loop's
	// pods of other nodes); nil until set.
	names atomic.Pointer[func(netip.Addr) string]
}

type subscriber struct {
	typ  string // "drop", "trace" or "" for both
	ch   chan api.Event
	mu   sync.Mutex
	lost uint64
}

func newMonitor(dp *datapath.Datapath, eps *endpoint.Manager, log *slog.Logger) *monitor {
	return &monitor{dp: dp, flags: dp, eps: eps, log: log, subs: map[*subscriber]bool{}}
}

// eventSwitch turns the datapath's per-packet events on and off.
type eventSwitch interface {
	SetDropEvents(on bool) error
	SetTrace(on bool) error
}

// Run reads datapath events and fans them out until ctx ends.
func (m *monitor) Run(ctx context.Context) {
	r, err := m.dp.NewEventReader()
	if err != nil {
		m.log.Error("open the event ring buffer", "err", err)
		return
	}
	go func() {
		<-ctx.Done()
		r.Close()
	}()
	for {
		ev, err := r.Read()
		if err != nil {
			if ctx.Err() == nil {
				m.log.Error("read datapath events", "err", err)
			}
			return
		}
		m.publish(m.resolve(ev))
	}
}

func (m *monitor) resolve(ev datapath.Event) api.Event {
	out := api.Event{
		Time: time.Now(), Type: ev.Type, Reason: ev.Reason, Direction: ev.Direction, IfIndex: ev.IfIndex,
		Src: ev.Src.String(), Dst: ev.Dst.String(), Proto: flow.ProtocolName(ev.Proto),
		SrcPort: ev.SrcPort, DstPort: ev.DstPort, Len: ev.Len,
	}
	out.SrcPod, out.DstPod = m.podName(ev.Src), m.podName(ev.Dst)
	out.PolicyDirection = policyDirection(ev)
	return out
}

// podName names the pod of ip: a local endpoint, else a pod the policy loop knows.
func (m *monitor) podName(ip netip.Addr) string {
	if name := m.eps.PodByIP(ip); name != "" {
		return name
	}
	if f := m.names.Load(); f != nil {
		return (*f)(ip)
	}
	return ""
}

// policyDirection is the side of a NetworkPolicy drop: egress drops are
// counted from-pod, ingress drops to-pod (bpf/lib/reasons.h).
func policyDirection(ev datapath.Event) string {
	switch ev.Reason {
	case "DROP_POLICY_DENIED", "DROP_POLICY_MAP_FULL", "DROP_POLICY_CT_BUDGET":
		if ev.Direction == "from-pod" {
			return "egress"
		}
		return "ingress"
	}
	return ""
}

func (m *monitor) publish(ev api.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for s := range m.subs {
		if s.typ != "" && s.typ != ev.Type {
			continue
		}
		select {
		case s.ch <- ev:
		default:
			s.mu.Lock()
			s.lost++
			s.mu.Unlock()
		}
	}
}

func (m *monitor) subscribe(typ string) *subscriber {
	s := &subscriber{typ: typ, ch: make(chan api.Event, subscriberBuffer)}
	m.mu.Lock()
	m.subs[s] = true
	m.updateEvents()
	m.mu.Unlock()
	return s
}

func (m *monitor) unsubscribe(s *subscriber) {
	m.mu.Lock()
	delete(m.subs, s)
	m.updateEvents()
	m.mu.Unlock()
}

// updateEvents switches drop events on while some client wants drops and trace
// events while some client wants traces. Called with m.mu held, so concurrent
// subscribe and unsubscribe calls leave the flags matching the last subscriber set.
func (m *monitor) updateEvents() {
	drops, traces := false, false
	for s := range m.subs {
		drops = drops || s.typ != "trace"
		traces = traces || s.typ != "drop"
	}
	if err := m.flags.SetDropEvents(drops); err != nil {
		m.log.Error("switch drop events", "on", drops, "err", err)
	}
	if err := m.flags.SetTrace(traces); err != nil {
		m.log.Error("switch trace events", "on", traces, "err", err)
	}
}

// kernelLost is the datapath's count of events the ring buffer had no room for.
func (m *monitor) kernelLost() uint64 {
	metrics, err := m.dp.Metrics()
	if err != nil {
		return 0
	}
	var n uint64
	for _, mt := range metrics {
		if mt.Reason == "EVENTS_LOST" {
			n += mt.Packets
		}
	}
	return n
}

// handleMonitor streams events as JSON lines, with a "lost" line every second in
// which events were lost (in the kernel's ring buffer or for this slow client).
func (a *server) handleMonitor(w http.ResponseWriter, r *http.Request) {
	typ := r.URL.Query().Get("type")
	if typ != "" && typ != "drop" && typ != "trace" {
		writeError(w, http.StatusBadRequest, fmt.Errorf("type %q: use drop, trace or leave it empty for both", typ))
		return
	}
	if a.monitor == nil {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("agent is starting"))
		return
	}
	flusher, _ := w.(http.Flusher)
	sub := a.monitor.subscribe(typ)
	defer a.monitor.unsubscribe(sub)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	enc := json.NewEncoder(w)
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	lastKernel := a.monitor.kernelLost()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev := <-sub.ch:
			if enc.Encode(ev) != nil {
				return
			}
		case <-ticker.C:
			k := a.monitor.kernelLost()
			sub.mu.Lock()
			lost := sub.lost + (k - lastKernel)
			sub.lost = 0
			sub.mu.Unlock()
			lastKernel = k
			if lost > 0 && enc.Encode(api.Event{Time: time.Now(), Type: "lost", Lost: lost}) != nil {
				return
			}
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}
