package datapath

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// Drop events are written only while drop_events_enabled is set (the agent sets it
// while a monitor client wants drops); the drop counter counts either way.
func TestPrivilegedBPFDropEventsGated(t *testing.T) {
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	r, err := d.NewEventReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	good := ipv4(protoUDP, "10.1.0.10", "10.1.0.20").build()
	in := good[:len(good)-4] // truncated: DROP_INVALID_PACKET
	drop := func() {
		t.Helper()
		ret, err := d.objs.MyelinFromPod.Run(&ebpf.RunOptions{Data: in})
		if err != nil {
			t.Fatal(err)
		}
		if ret != tcActShot {
			t.Fatalf("verdict = %d, want TC_ACT_SHOT", ret)
		}
	}
	dropped := func() uint64 {
		t.Helper()
		m, err := counter(d, "from-pod", "DROP_INVALID_PACKET")
		if err != nil {
			t.Fatal(err)
		}
		return m.Packets
	}

	if err := d.SetDropEvents(false); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		drop()
	}
	if ev, ok := readEvent(t, r, 100*time.Millisecond); ok {
		t.Fatalf("drop event while drop events are off: %+v", ev)
	}
	if n := dropped(); n != 3 {
		t.Fatalf("DROP_INVALID_PACKET counter = %d with drop events off, want 3", n)
	}
	if m, _ := counter(d, "from-pod", "EVENTS_LOST"); m.Packets != 0 {
		t.Errorf("EVENTS_LOST = %d with drop events off, want 0", m.Packets)
	}

	if err := d.SetDropEvents(true); err != nil {
		t.Fatal(err)
	}
	drop()
	ev, ok := readEvent(t, r, time.Second)
	if !ok {
		t.Fatal("no drop event while drop events are on")
	}
	if ev.Type != "drop" || ev.Reason != "DROP_INVALID_PACKET" {
		t.Errorf("event = %+v, want a DROP_INVALID_PACKET drop", ev)
	}
	if n := dropped(); n != 4 {
		t.Errorf("DROP_INVALID_PACKET counter = %d, want 4", n)
	}
}

// A freshly loaded datapath has drop and trace events off: nothing is written to
// the ring buffer until a monitor client asks.
func TestPrivilegedBPFEventsOffAfterLoad(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDir(t)
	d, err := Load(Config{HostRouting: HostRoutingBPF, PinDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		if err := Unpin(dir); err != nil {
			t.Error(err)
		}
	})
	for name, v := range map[string]*ebpf.Variable{"drop_events_enabled": d.objs.DropEventsEnabled, "trace_enabled": d.objs.TraceEnabled} {
		var got uint32
		if err := v.Get(&got); err != nil {
			t.Fatal(err)
		}
		if got != 0 {
			t.Errorf("%s = %d after Load, want 0", name, got)
		}
	}
}
