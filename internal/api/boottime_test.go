package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// BootNow reads this machine's boot id and a clock that moves forward; a record
// keeps it through JSON, and an older plugin's record (without it) reads as unknown.
func TestBootNowAndRecords(t *testing.T) {
	a := BootNow()
	time.Sleep(time.Millisecond)
	b := BootNow()
	if !a.Known() || a.Boot != b.Boot || b.Nanos <= a.Nanos {
		t.Fatalf("BootNow %+v then %+v: want the same boot and a later moment", a, b)
	}
	rec := DeletedEndpoint{ContainerID: "c", HostIfName: HostIfName("c"), DeletedBoot: b}
	out, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var back DeletedEndpoint
	if err := json.Unmarshal(out, &back); err != nil || back.DeletedBoot != b {
		t.Fatalf("%s read back as %+v (%v)", out, back.DeletedBoot, err)
	}
	old, err := json.Marshal(DeletedEndpoint{ContainerID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(old), "deletedBoot") {
		t.Errorf("%s: an unknown boot moment is written", old)
	}
	var older DeletedEndpoint
	if err := json.Unmarshal([]byte(`{"containerID":"c","hostIfName":"x","deleted":"2026-01-01T00:00:00Z"}`), &older); err != nil || older.DeletedBoot.Known() {
		t.Errorf("an older record: %+v (%v), want an unknown boot moment", older.DeletedBoot, err)
	}
}
