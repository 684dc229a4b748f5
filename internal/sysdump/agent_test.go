package sysdump

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/testenv"
)

// TestPrivilegedDumpPinnedMaps: a pinned hash map is dumped up to the bound with its
// total; socket storage, which user space can't walk, says so instead of looking
// empty.
func TestPrivilegedDumpPinnedMaps(t *testing.T) {
	testenv.RequireRoot(t, "mount a bpffs and pin maps")
	dir := filepath.Join(t.TempDir(), "bpffs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount bpffs on %s: %v", dir, err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)

	hash, err := ebpf.NewMap(&ebpf.MapSpec{Name: "test_hash", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer hash.Close()
	for k := range uint32(3) {
		if err := hash.Put(k, k*10); err != nil {
			t.Fatal(err)
		}
	}
	i32 := &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	sk, err := ebpf.NewMap(&ebpf.MapSpec{Name: "test_sk", Type: ebpf.SkStorage, KeySize: 4, ValueSize: 4,
		Flags: unix.BPF_F_NO_PREALLOC, Key: i32, Value: i32})
	if err != nil {
		t.Fatal(err)
	}
	defer sk.Close()
	for name, m := range map[string]*ebpf.Map{"test_hash": hash, "test_sk": sk} {
		if err := m.Pin(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}

	dumps, err := DumpPinnedMaps(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	if h := dumps["test_hash"]; h.Total != 3 || h.Shown != 2 || len(h.Entries) != 2 || h.Error != "" {
		t.Errorf("hash map dump %+v, want total 3, 2 shown, no error", h)
	}
	if s, ok := dumps["test_sk"]; !ok || s.Error == "" {
		t.Errorf("socket storage dump %+v (present %v), want an error saying it can't be walked", s, ok)
	}
}

// An agent that streams drop events without end (a pod sending denied packets at line
// rate) fills at most maxDropsBytes of the collector's memory; the last line says the
// events were cut.
func TestAgentDropsBounded(t *testing.T) {
	ev, _ := json.Marshal(api.Event{Type: "drop", Reason: "POLICY_DENIED", Src: "10.244.0.5", Dst: "10.244.1.7"})
	sock := testenv.ServeUnixHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		for r.Context().Err() == nil {
			if _, err := w.Write(append(ev, '\n')); err != nil {
				return
			}
		}
	})
	out, err := AgentDrops(context.Background(), api.NewClient(sock), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(out) > maxDropsBytes+1024 || !strings.Contains(lines[len(lines)-1], `"sysdump":"drop events cut after`) {
		t.Errorf("AgentDrops of an endless stream: %d bytes ending %q; want at most %d and a last line saying it was cut",
			len(out), lines[len(lines)-1], maxDropsBytes+1024)
	}
}
