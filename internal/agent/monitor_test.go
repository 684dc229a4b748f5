package agent

import (
	"io"
	"log/slog"
	"testing"
)

type fakeEventSwitch struct{ drops, traces bool }

func (f *fakeEventSwitch) SetDropEvents(on bool) error { f.drops = on; return nil }
func (f *fakeEventSwitch) SetTrace(on bool) error      { f.traces = on; return nil }

// The datapath's drop and trace events follow the monitor's subscribers: on while
// at least one client wants them, off when the last one leaves.
func TestMonitorEventFlagsFollowSubscribers(t *testing.T) {
	f := &fakeEventSwitch{}
	m := &monitor{flags: f, log: slog.New(slog.NewTextHandler(io.Discard, nil)), subs: map[*subscriber]bool{}}
	check := func(step string, drops, traces bool) {
		t.Helper()
		if f.drops != drops || f.traces != traces {
			t.Errorf("%s: drops=%v traces=%v, want drops=%v traces=%v", step, f.drops, f.traces, drops, traces)
		}
	}
	d1 := m.subscribe("drop")
	check("one drop client", true, false)
	d2 := m.subscribe("drop")
	m.unsubscribe(d1)
	check("one of two drop clients left", true, false)
	tr := m.subscribe("trace")
	check("drop and trace clients", true, true)
	m.unsubscribe(d2)
	check("trace client only", false, true)
	all := m.subscribe("")
	check("trace client and one wanting both", true, true)
	m.unsubscribe(tr)
	check("one client wanting both", true, true)
	m.unsubscribe(all)
	check("no client", false, false)
}
