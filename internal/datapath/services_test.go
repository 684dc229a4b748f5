package datapath

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// The Go flags are the C ones.
func TestServiceFlagsMatchC(t *testing.T) {
	if uint8(ServiceNodePort) != uint8(myelinLbSvcFlagsLB_SVC_F_NODEPORT) || uint8(ServiceAffinity) != uint8(myelinLbSvcFlagsLB_SVC_F_AFFINITY) ||
		uint8(ServiceExternalLocal) != uint8(myelinLbSvcFlagsLB_SVC_F_EXT_LOCAL) ||
		uint8(ServiceExternalIP) != uint8(myelinLbSvcFlagsLB_SVC_F_EXTERNAL_IP) {
		t.Errorf("ServiceNodePort %d, ServiceAffinity %d, ServiceExternalLocal %d, ServiceExternalIP %d differ from the C flags %d, %d, %d, %d",
			ServiceNodePort, ServiceAffinity, ServiceExternalLocal, ServiceExternalIP,
			myelinLbSvcFlagsLB_SVC_F_NODEPORT, myelinLbSvcFlagsLB_SVC_F_AFFINITY, myelinLbSvcFlagsLB_SVC_F_EXT_LOCAL, myelinLbSvcFlagsLB_SVC_F_EXTERNAL_IP)
	}
	if serviceFlagsKnown&ServiceFlags(myelinLbSvcFlagsLB_SVC_F_MAGLEV) != 0 {
		t.Errorf("a Go service flag is the datapath's own Maglev bit %d", myelinLbSvcFlagsLB_SVC_F_MAGLEV)
	}
}

func TestServiceValue(t *testing.T) {
	table := []uint32{1, 2, 1, 2, 1, 2, 1}
	v, err := serviceValue(Service{ID: 4, Flags: ServiceAffinity, AffinityTimeout: 1500 * time.Millisecond, Backends: []uint32{1, 2}, Maglev: table}, 7)
	if err != nil {
		t.Fatal(err)
	}
	if want := (myelinLbSvc{Id: 4, Count: 2, AffinityTimeout: 2, Flags: uint8(ServiceAffinity) | uint8(myelinLbSvcFlagsLB_SVC_F_MAGLEV)}); v != want {
		t.Errorf("serviceValue = %+v, want %+v", v, want)
	}
	v, err = serviceValue(Service{ID: 5, Flags: ServiceNodePort | ServiceExternalLocal, Backends: []uint32{3, 1, 2}, LocalBackends: 2,
		Maglev: []uint32{3, 1, 3, 1, 3, 1, 3}}, 7)
	if err != nil {
		t.Fatal(err)
	}
	if want := (myelinLbSvc{Id: 5, Count: 3, LocalCount: 2, Flags: uint8(ServiceNodePort|ServiceExternalLocal) | uint8(myelinLbSvcFlagsLB_SVC_F_MAGLEV)}); v != want {
		t.Errorf("serviceValue = %+v, want %+v", v, want)
	}
	for _, c := range []struct {
		name string
		s    Service
		size uint32
		want string
	}{
		{"id 0", Service{Backends: []uint32{1}}, 0, "service id 0"},
		{"unknown flag", Service{ID: 1, Flags: 32}, 0, "unknown service flags"},
		{"the Maglev bit", Service{ID: 1, Flags: 4}, 0, "unknown service flags"},
		{"local pool without the flag", Service{ID: 1, Backends: []uint32{1}, LocalBackends: 1}, 0, "without ServiceExternalLocal"},
		{"local pool beyond the backends", Service{ID: 1, Flags: ServiceExternalLocal, Backends: []uint32{1}, LocalBackends: 2}, 0, "2 local backends of 1"},
		{"Maglev over remote backends", Service{ID: 1, Flags: ServiceExternalLocal, Backends: []uint32{1, 2}, LocalBackends: 1,
			Maglev: []uint32{1, 1, 1, 2, 1, 1, 1}}, 7, "entry 3 is backend 2, which is not in the first 1 (local) Backends"},
		{"backend id 0", Service{ID: 1, Backends: []uint32{1, 0}}, 0, "backend id 0"},
		{"affinity without timeout", Service{ID: 1, Flags: ServiceAffinity}, 0, "affinity timeout"},
		{"table without Maglev", Service{ID: 1, Backends: []uint32{1}, Maglev: []uint32{1}}, 0, "MaglevTableSize 0"},
		{"table of the wrong size", Service{ID: 1, Backends: []uint32{1}, Maglev: []uint32{1}}, 7, "want Config.MaglevTableSize = 7"},
		{"table with a stranger", Service{ID: 1, Backends: []uint32{1}, Maglev: []uint32{1, 1, 1, 3, 1, 1, 1}}, 7, "entry 3 is backend 3"},
	} {
		if _, err := serviceValue(c.s, c.size); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", c.name, err, c.want)
		}
	}
	for _, fe := range []Frontend{{Addr: mustAddr("fd00::1"), Port: 80, Proto: protoTCP}, {Addr: mustAddr(vip), Port: 80, Proto: protoICMP}, {Addr: mustAddr(vip), Proto: protoTCP}} {
		if _, err := serviceKey(fe); err == nil {
			t.Errorf("serviceKey(%v) accepted", fe)
		}
	}
}

func TestCheckLoadBalancing(t *testing.T) {
	good := Config{LoadBalancing: true, NodeIP: testNodeIP, ClusterCIDR: lbClusterCIDR, MaglevTableSize: 16381}
	if err := checkLoadBalancing(good); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"no node IP":      {func(c *Config) { c.NodeIP = mustAddr("0.0.0.0") }, "Config.NodeIP"},
		"no cluster CIDR": {func(c *Config) { c.ClusterCIDR = netip.Prefix{} }, "Config.ClusterCIDR"},
		"not prime":       {func(c *Config) { c.MaglevTableSize = 16383 }, "16383 is not prime"},
		"one":             {func(c *Config) { c.MaglevTableSize = 1 }, "1 is not prime"},
	} {
		cfg := good
		c.edit(&cfg)
		if err := checkLoadBalancing(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", name, err, c.want)
		}
	}
}

// sk is a slot key.
func sk(id, slot uint32) myelinLbSlotKey { return myelinLbSlotKey{SvcId: id, Slot: slot} }

// UpsertService replaces slots (a shrink deletes the extra ones), follows
// an id change, lists what it wrote, and DeleteService removes it all.
func TestPrivilegedServicesAPI(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	if err := seedLB(d, lbState{backends: map[uint32]Backend{1: backendB, 2: backendRemote, 3: {Addr: mustAddr("10.1.0.30"), Port: 9090}}}); err != nil {
		t.Fatal(err)
	}
	slots := func() []myelinLbSlotKey {
		var (
			k   myelinLbSlotKey
			v   uint32
			out []myelinLbSlotKey
		)
		it := d.objs.MyelinLbSlots.Iterate()
		for it.Next(&k, &v) {
			out = append(out, k)
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(out, func(a, b myelinLbSlotKey) int {
			return int(a.SvcId)*1000 + int(a.Slot) - int(b.SvcId)*1000 - int(b.Slot)
		})
		return out
	}
	steps := []struct {
		s    Service
		want []myelinLbSlotKey
	}{
		{Service{ID: 5, Backends: []uint32{1, 2, 3}}, []myelinLbSlotKey{sk(5, 0), sk(5, 1), sk(5, 2)}},
		{Service{ID: 5, Backends: []uint32{3}}, []myelinLbSlotKey{sk(5, 0)}},
		{Service{ID: 6, Flags: ServiceAffinity, AffinityTimeout: time.Hour, Backends: []uint32{2, 1}}, []myelinLbSlotKey{sk(6, 0), sk(6, 1)}},
		{Service{ID: 6}, nil},
	}
	for i, st := range steps {
		if err := d.UpsertService(feTCP, st.s); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := slots(); !slices.Equal(got, st.want) {
			t.Errorf("step %d: slots %v, want %v", i, got, st.want)
		}
		svcs, err := d.Services()
		if err != nil || len(svcs) != 1 || svcs[0].Frontend != feTCP || svcs[0].ID != st.s.ID || svcs[0].Flags != st.s.Flags ||
			svcs[0].AffinityTimeout != st.s.AffinityTimeout || !slices.Equal(svcs[0].Backends, st.s.Backends) {
			t.Errorf("step %d: Services() = %+v, %v; want %v: %+v", i, svcs, err, feTCP, st.s)
		}
	}
	if err := d.UpsertService(feTCP, Service{ID: 6, Backends: []uint32{1, 2}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := d.DeleteService(feTCP); err != nil {
			t.Errorf("DeleteService #%d: %v", i+1, err)
		}
	}
	if got := slots(); len(got) != 0 {
		t.Errorf("slots after DeleteService: %v", got)
	}
	bs, err := d.Backends()
	if err != nil || len(bs) != 3 || bs[3] != (Backend{Addr: mustAddr("10.1.0.30"), Port: 9090}) {
		t.Errorf("Backends() = %v, %v", bs, err)
	}
	if err := d.UpsertBackend(0, backendB); err == nil {
		t.Error("UpsertBackend accepted id 0")
	}
	for i := 0; i < 2; i++ {
		if err := d.DeleteBackend(3); err != nil {
			t.Errorf("DeleteBackend #%d: %v", i+1, err)
		}
	}
	off := loadTest(t, HostRoutingBPF)
	if err := off.UpsertBackend(1, backendB); !errors.Is(err, ErrLoadBalancingOff) {
		t.Errorf("UpsertBackend without load balancing: %v, want ErrLoadBalancingOff", err)
	}
}
