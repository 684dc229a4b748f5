package datapath

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/myelin-net/myelin/internal/testenv"
)

// TestPrivilegedLoadAll loads every program of the object in both host
// routing modes, native and tunnel, with masquerade and load balancing
// (random and Maglev, with and without socket-LB's flow lookup) on and off,
// so a verifier rejection fails here with the log.
func TestPrivilegedLoadAll(t *testing.T) {
	requirePrivileged(t)
	features := []struct {
		name             string
		masq, lb, sockLB bool
		maglevTableSize  uint32
	}{
		{name: ""},
		{name: "/masquerade", masq: true},
		{name: "/lb", lb: true},
		{name: "/lb-maglev/masquerade", masq: true, lb: true, maglevTableSize: 16381},
		{name: "/lb-maglev/masquerade/socket-lb", masq: true, lb: true, sockLB: true, maglevTableSize: 16381},
	}
	for _, routing := range []HostRouting{HostRoutingLegacy, HostRoutingBPF} {
		for _, tunnel := range []bool{false, true} {
			for _, f := range features {
				name := routing.String() + "/native"
				if tunnel {
					name = routing.String() + "/tunnel"
				}
				t.Run(name+f.name, func(t *testing.T) {
					loadAll(t, Config{HostRouting: routing, Tunnel: tunnel, OverlayIfIndex: 1, OverlayMAC: testOverlayMAC,
						Masquerade: f.masq, NodeIP: testNodeIP, ClusterCIDR: testClusterCIDR,
						LoadBalancing: f.lb, SocketLB: f.sockLB, MaglevTableSize: f.maglevTableSize})
				})
			}
		}
	}
}

// loadAll loads every program of the object configured with cfg.
func loadAll(t *testing.T, cfg Config) {
	spec, err := loadMyelin()
	if err != nil {
		t.Fatal(err)
	}
	if err := configure(spec, cfg); err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Maps: ebpf.MapOptions{PinPath: testPinDirReady(t)},
	})
	var verr *ebpf.VerifierError
	if errors.As(err, &verr) {
		t.Fatalf("verifier rejected a program: %+v", verr)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	if len(coll.Programs) != len(spec.Programs) || len(spec.Programs) == 0 {
		t.Fatalf("loaded %d of %d programs", len(coll.Programs), len(spec.Programs))
	}
	for name, prog := range coll.Programs {
		info, err := prog.Info()
		if err != nil {
			t.Fatal(err)
		}
		insns, _ := info.VerifiedInstructions()
		t.Logf("%s: %d instructions verified", name, insns)
	}
}

// testPinDirReady is testPinDir, created.
func testPinDirReady(t testing.TB) string {
	dir := testPinDir(t)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// An agent restart (Close, Load) keeps endpoints and counters; a resized
// endpoints map is replaced with its entries carried over.
func TestPrivilegedLoadReusesPinnedMaps(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDir(t)
	defer Unpin(dir)
	ip := netip.MustParseAddr("10.1.0.20")

	d, err := Load(Config{PinDir: dir, HostRouting: HostRoutingBPF})
	if err != nil {
		t.Fatal(err)
	}
	if err := seedEndpoints(d, seedAB); err != nil {
		t.Fatal(err)
	}
	in := ipv4(protoUDP, "10.1.0.10", "10.1.0.20").build()
	if _, err := d.objs.MyelinFromPod.Run(&ebpf.RunOptions{Data: in, Context: *ctxPodA}); err != nil {
		t.Fatal(err)
	}
	d.Close()
	for _, name := range []string{"myelin_endpoints", "myelin_tunnel", "myelin_metrics", "myelin_events", "myelin_snat", "myelin_nomasq"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("map pin: %v", err)
		}
	}

	for _, max := range []uint32{0, 2048} {
		d, err = Load(Config{PinDir: dir, HostRouting: HostRoutingBPF, EndpointsMax: max})
		if err != nil {
			t.Fatalf("reload with EndpointsMax %d: %v", max, err)
		}
		eps, err := d.Endpoints()
		if err != nil {
			t.Fatal(err)
		}
		got, ok := eps[ip]
		if !ok || got.IfIndex != podB.IfIndex || got.PodMAC.String() != podB.PodMAC.String() ||
			got.HostMAC.String() != podB.HostMAC.String() || got.ID != podB.ID {
			t.Errorf("EndpointsMax %d: endpoints after reload = %v, want %s: %+v", max, eps, ip, podB)
		}
		fill, err := d.MapFill()
		if err != nil {
			t.Fatal(err)
		}
		wantMax := int(max)
		if max == 0 {
			wantMax = objectMapSize(t, "myelin_endpoints")
		}
		if len(fill) != 3 || fill[0] != (MapFill{Name: "myelin_endpoints", Entries: 2, Max: wantMax}) ||
			fill[1] != (MapFill{Name: "myelin_tunnel", Entries: 0, Max: 1024}) ||
			fill[2] != (MapFill{Name: "myelin_snat", Entries: 0, Max: objectMapSize(t, "myelin_snat")}) {
			t.Errorf("MapFill = %+v, want endpoints 2 of %d, tunnel 0 of 1024, snat 0 of %d", fill, wantMax, objectMapSize(t, "myelin_snat"))
		}
		d.Close()
	}

	// Counters survive a reload with unchanged maps.
	d, err = Load(Config{PinDir: dir, HostRouting: HostRoutingBPF, EndpointsMax: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	m, err := counter(d, "from-pod", "FORWARDED")
	if err != nil {
		t.Fatal(err)
	}
	if m.Packets != 1 {
		t.Errorf("FORWARDED packets after reload = %d, want 1", m.Packets)
	}
}

// The programs loaded one per goroutine use the collection's maps, not
// copies of their own, and a verifier rejection still names its program.
func TestPrivilegedLoadConcurrently(t *testing.T) {
	requirePrivileged(t)
	spec, err := loadMyelin()
	if err != nil {
		t.Fatal(err)
	}
	if err := configure(spec, Config{HostRouting: HostRoutingBPF}); err != nil {
		t.Fatal(err)
	}
	opts := ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: testPinDirReady(t)}}
	coll, err := loadConcurrently(spec, opts)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer coll.Close()
	if len(coll.Programs) != len(spec.Programs) {
		t.Fatalf("loaded %d of %d programs", len(coll.Programs), len(spec.Programs))
	}
	ids := map[ebpf.MapID]bool{}
	for _, m := range coll.Maps {
		info, err := m.Info()
		if err != nil {
			t.Fatal(err)
		}
		id, _ := info.ID()
		ids[id] = true
	}
	for name, p := range coll.Programs {
		info, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		used, ok := info.MapIDs()
		if !ok || len(used) == 0 {
			t.Fatalf("%s: no map IDs in its info", name)
		}
		for _, id := range used {
			if !ids[id] {
				t.Errorf("%s uses map %d, which is not one of the collection's", name, id)
			}
		}
	}

	bad := spec.Copy()
	// An exit without setting R0 first, keeping the symbol and BTF function of the
	// program's first instruction.
	exit := asm.Return()
	exit.Metadata = bad.Programs["myelin_to_pod"].Instructions[0].Metadata
	bad.Programs["myelin_to_pod"].Instructions = asm.Instructions{exit}
	_, err = loadConcurrently(bad, opts)
	var verr *ebpf.VerifierError
	if !errors.As(err, &verr) || !strings.Contains(err.Error(), "program myelin_to_pod") {
		t.Fatalf("err = %v, want a verifier error naming myelin_to_pod", err)
	}
}

// BenchmarkLoad compares loading the object's programs one after another (what
// cilium/ebpf does) with loadConcurrently, as an agent loads by default (native mode). Run as root:
// go test -run '^$' -bench Load -count 5 ./internal/datapath/
func BenchmarkLoad(b *testing.B) {
	testenv.RequireRoot(b, "load BPF")
	spec, err := loadMyelin()
	if err != nil {
		b.Fatal(err)
	}
	// What an agent loads by default (docs/scale.md, "Services after a restart").
	if err := configure(spec, agentDefaultConfig()); err != nil {
		b.Fatal(err)
	}
	load := map[string]func(*ebpf.CollectionSpec, ebpf.CollectionOptions) (*ebpf.Collection, error){
		"sequential": ebpf.NewCollectionWithOptions, "concurrent": loadConcurrently}
	for _, name := range []string{"sequential", "concurrent"} {
		b.Run(name, func(b *testing.B) {
			opts := ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: testPinDirReady(b)}}
			for b.Loop() {
				coll, err := load[name](spec, opts)
				if err != nil {
					b.Fatal(err)
				}
				coll.Close()
			}
		})
	}
}

func TestPrivilegedLoadRejectsNonBPFFS(t *testing.T) {
	requirePrivileged(t)
	_, err := Load(Config{PinDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "not on bpffs") {
		t.Fatalf("Load on a non-bpffs dir: err = %v, want a 'not on bpffs' error", err)
	}
}

func TestPrivilegedEndpointsAPI(t *testing.T) {
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	ip := netip.MustParseAddr("10.1.0.20")
	if err := d.UpsertEndpoint(netip.MustParseAddr("fd00::1"), podB); err == nil {
		t.Error("UpsertEndpoint accepted an IPv6 address")
	}
	if err := d.UpsertEndpoint(ip, EndpointInfo{IfIndex: 3, PodMAC: podBMAC}); err == nil {
		t.Error("UpsertEndpoint accepted a missing host MAC")
	}
	if err := d.UpsertEndpoint(netip.MustParseAddr("::ffff:10.1.0.20"), podB); err != nil {
		t.Errorf("UpsertEndpoint with an IPv4-mapped address: %v", err)
	}
	if eps, _ := d.Endpoints(); len(eps) != 1 {
		t.Errorf("endpoints = %v, want only %s", eps, ip)
	}
	for i := 0; i < 2; i++ {
		if err := d.DeleteEndpoint(ip); err != nil {
			t.Errorf("DeleteEndpoint #%d: %v", i+1, err)
		}
	}
	if eps, _ := d.Endpoints(); len(eps) != 0 {
		t.Errorf("endpoints after delete = %v", eps)
	}
}

// The development kernel (6.18) has everything BPF host routing needs.
func TestPrivilegedProbe(t *testing.T) {
	requirePrivileged(t)
	f := Probe()
	t.Logf("features: %+v", f)
	if m := f.Missing(); len(m) != 0 {
		t.Errorf("Probe reports missing %q on a kernel that has them", m)
	}
}

// objectMapSize is the size the object gives map name (bpf/lib/maps.h), what a zero
// size in Config keeps.
func objectMapSize(t *testing.T, name string) int {
	t.Helper()
	spec, err := loadMyelin()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := spec.Maps[name]
	if !ok || m.MaxEntries == 0 {
		t.Fatalf("the object has no sized map %s", name)
	}
	return int(m.MaxEntries)
}
