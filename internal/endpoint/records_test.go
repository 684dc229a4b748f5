package endpoint

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// Any container id the CNI spec allows can be recorded: it sets no length limit, and
// an id of more than 246 bytes made a record file name the file system refused (with
// statefile's ".tmp"), so ADD failed in the agent with "file name too long".
func TestRecordOfALongContainerID(t *testing.T) {
	f, eps, restart := restartFixture(t)
	id := "c" + strings.Repeat("0123456789", 30)[:299] // 300 bytes
	long := f.add(t, id, 4)
	f2 := restart()
	if adopted, removed, err := f2.m.Restore(); adopted != 4 || removed != 0 || err != nil {
		t.Fatalf("Restore = %d adopted, %d removed, %v; want 4, 0, nil", adopted, removed, err)
	}
	if got, ok := f2.m.Get(id); !ok || got.IP != long.IP || got.HostIfIndex != 4 {
		t.Errorf("the %d-byte container id after restore: %+v %v, want IP %s on index 4", len(id), got, ok, long.IP)
	}
	f2.intact(t, "after restore", eps["a"])
	if err := f2.m.DeleteOwned(id, 4); err != nil {
		t.Fatal(err)
	}
	f.noRecordOf(t, "after its DEL", id)
}

// Records written by earlier agents (the file named by the container id) are
// restored; writing the endpoint again replaces the record, and deleting it removes
// it, so a container never has two records.
func TestRecordInTheFormerFormat(t *testing.T) {
	f, eps, restart := restartFixture(t)
	f.toFormerFormat(t, "b")
	f.toFormerFormat(t, "c")
	f2 := restart()
	if adopted, removed, err := f2.m.Restore(); adopted != 3 || removed != 0 || err != nil {
		t.Fatalf("Restore = %d adopted, %d removed, %v; want 3, 0, nil", adopted, removed, err)
	}
	f2.intact(t, "after restore", eps["b"])
	f2.intact(t, "after restore", eps["c"])

	again := f2.add(t, "b", 2) // a second ADD of b rewrites its record
	if again.IP != eps["b"].IP {
		t.Fatalf("b's second ADD got %s, want its %s", again.IP, eps["b"].IP)
	}
	if _, err := os.Stat(f.recordFile(formerFormat, "b")); !os.IsNotExist(err) {
		t.Errorf("b's record in the former format after it was written again: %v, want it removed", err)
	}
	if err := f2.m.DeleteOwned("c", eps["c"].HostIfIndex); err != nil {
		t.Fatal(err)
	}
	f.noRecordOf(t, "after c's DEL", "c")

	f3 := restart()
	if adopted, removed, err := f3.m.Restore(); adopted != 2 || removed != 0 || err != nil {
		t.Fatalf("second Restore = %d adopted, %d removed, %v; want 2 (a, b), 0, nil", adopted, removed, err)
	}
	f3.intact(t, "after the second restore", eps["b"])
}

// A container with a record in each format (an agent stopped between writing the new
// one and removing the former) is restored from the new one, and the former is removed.
func TestRecordInBothFormats(t *testing.T) {
	f, eps, restart := restartFixture(t)
	stale := eps["b"]
	stale.Pod = "stale"
	b, err := json.Marshal(stale)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.recordFile(formerFormat, "b"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	f2 := restart()
	if adopted, removed, err := f2.m.Restore(); adopted != 3 || removed != 0 || err != nil {
		t.Fatalf("Restore = %d adopted, %d removed, %v; want 3, 0, nil", adopted, removed, err)
	}
	if got, _ := f2.m.Get("b"); got.Pod != "b" {
		t.Errorf("b restored from its record in the former format (pod %q), want the current one's", got.Pod)
	}
	if _, err := os.Stat(f.recordFile(formerFormat, "b")); !os.IsNotExist(err) {
		t.Errorf("b's record in the former format after restore: %v, want it removed", err)
	}
}

// toFormerFormat moves id's record to the file name earlier agents wrote it under.
func (f *fixture) toFormerFormat(t *testing.T, id string) {
	t.Helper()
	if err := os.Rename(f.recordFile(currentFormat, id), f.recordFile(formerFormat, id)); err != nil {
		t.Fatal(err)
	}
}
