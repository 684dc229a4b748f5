package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/myelin-net/myelin/internal/datapath"
)

// collectMaps reports every map's fill and failed counts, and the conntrack and
// NAT tables again under their own names.
func collectMaps(ch chan<- prometheus.Metric, s Snapshot) {
	for _, m := range s.Maps {
		ch <- gauge(mapEntriesDesc, float64(m.Entries), m.Name, m.Kind)
		ch <- gauge(mapCapDesc, float64(m.Max), m.Name, m.Kind)
		ch <- counter(mapErrorsDesc, m.ReadErrors, m.Name, m.Kind)
		ch <- gauge(mapFailingDesc, boolValue(m.Failing), m.Name, m.Kind)
		pressure := 0.0
		if m.Max > 0 {
			pressure = float64(m.Entries) / float64(m.Max)
		}
		ch <- gauge(mapPressureDesc, pressure, m.Name, m.Kind)
		switch m.Kind {
		case datapath.MapKindConntrack:
			ch <- gauge(ctEntriesDesc, float64(m.Entries), m.Name)
		case datapath.MapKindNAT:
			ch <- gauge(natEntriesDesc, float64(m.Entries), m.Name)
		}
	}
}

// collectCounters splits the datapath's counters into drops (every DROP_ reason,
// and reasons this build has no name for), forwards, lost events and lost flows, and
// plain pod-to-node arrivals (tunnel-pod-to-node encapsulate).
func collectCounters(ch chan<- prometheus.Metric, s Snapshot) {
	for _, c := range s.Counters {
		switch {
		case c.Reason == "FORWARDED":
			ch <- counter(fwdPktsDesc, c.Packets, c.Direction, "bpf")
			ch <- counter(fwdBytesDesc, c.Bytes, c.Direction, "bpf")
		case c.Reason == "PASS_STACK":
			ch <- counter(fwdPktsDesc, c.Packets, c.Direction, "stack")
			ch <- counter(fwdBytesDesc, c.Bytes, c.Direction, "stack")
		case c.Reason == "EVENTS_LOST":
			ch <- counter(eventsLostDesc, c.Packets, c.Direction)
		case c.Reason == "FLOWS_LOST":
			ch <- counter(flowsLostDesc, c.Packets, c.Direction)
		case c.Reason == "FLOWS_LIMITED":
			ch <- counter(flowsLimitedDesc, c.Packets, c.Direction)
		case c.Reason == "PLAIN_POD_TO_NODE":
			ch <- counter(plainPodDesc, c.Packets)
		default:
			reason := c.Reason
			if !strings.HasPrefix(reason, "DROP_") {
				reason = "DROP_" + reason // REASON_<n>: a code this build does not name
			}
			ch <- counter(dropPktsDesc, c.Packets, reason, c.Direction)
			ch <- counter(dropBytesDesc, c.Bytes, reason, c.Direction)
		}
	}
}

// collectControllers reports the control loops and the datapath GC.
func collectControllers(ch chan<- prometheus.Metric, s Snapshot) {
	for _, c := range s.Controllers {
		ch <- counter(ctrlRunsDesc, c.Runs, c.Name)
		ch <- counter(ctrlErrsDesc, c.Errors, c.Name)
		ch <- gauge(ctrlFailDesc, boolValue(c.Failing), c.Name)
	}
	for _, g := range s.GC {
		ch <- counter(gcRunsDesc, g.Runs, g.Table)
		ch <- counter(gcRemovedDesc, g.Removed, g.Table)
	}
}
