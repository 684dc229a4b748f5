package endpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
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

// A record of a container id that fits a file name is <id>.json, as every earlier
// agent wrote and read it: an agent rolled back to one of them still adopts its pods
// (it takes the id from the file name).
func TestRecordNamedAfterItsContainer(t *testing.T) {
	f, eps, _ := restartFixture(t)
	for id, ep := range eps {
		b, err := os.ReadFile(filepath.Join(f.dir, "endpoints", id+".json"))
		var got api.Endpoint
		if err == nil {
			err = json.Unmarshal(b, &got)
		}
		if err != nil || got.ContainerID != id || got.IP != ep.IP {
			t.Errorf("%s.json: %+v, %v; want %s's record", id, got, err, id)
		}
	}
}
