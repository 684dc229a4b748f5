package datapath

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// OpenPinned adopts the maps of a loaded datapath without loading anything:
// its GCNAT removes an idle flow from the very map the loaded programs use,
// and an empty pin dir is os.ErrNotExist (a first start).
func TestPrivilegedOpenPinnedCollectsNAT(t *testing.T) {
	requirePrivileged(t)
	d := loadMasq(t, HostRoutingBPF, 0)
	if err := clearNAT(d); err != nil {
		t.Fatal(err)
	}
	now := 10 * time.Hour
	idle := flow(protoUDP, podA, 2001, 2001, extHost, 53, "udp")
	fresh := flow(protoUDP, podA, 2002, 2002, extHost, 53, "udp")
	for _, s := range []struct {
		f    NATEntry
		seen time.Duration
	}{{idle, now - 2*time.Minute}, {fresh, now - time.Second}} {
		fk, fv, rk, rv := natEntriesOf(s.f, testNodeIP, s.seen)
		if err := errors.Join(d.objs.MyelinSnat.Update(fk, fv, ebpf.UpdateAny),
			d.objs.MyelinSnat.Update(rk, rv, ebpf.UpdateAny)); err != nil {
			t.Fatal(err)
		}
	}

	adopted, err := OpenPinned(d.cfg.PinDir)
	if err != nil {
		t.Fatalf("OpenPinned: %v", err)
	}
	defer adopted.Close()
	if n, err := adopted.GCNAT(now); err != nil || n != 2 {
		t.Errorf("GCNAT on the adopted maps = %d, %v; want 2 (the idle flow's entries)", n, err)
	}
	if err := checkNAT(d, []NATEntry{fresh}); err != nil {
		t.Errorf("the loaded datapath's map after the adopted GC: %v", err)
	}

	// A node upgraded from a build without myelin_lb_nodeports or
	// myelin_flow_drops: adopted all the same.
	for _, name := range []string{"myelin_lb_nodeports", "myelin_flow_drops"} {
		if err := os.Remove(filepath.Join(d.cfg.PinDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	upgraded, err := OpenPinned(d.cfg.PinDir)
	if err != nil {
		t.Errorf("OpenPinned without myelin_lb_nodeports and myelin_flow_drops (an upgrade): %v", err)
	} else {
		upgraded.Close()
	}

	if _, err := OpenPinned(testPinDir(t)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenPinned of an empty pin dir = %v, want os.ErrNotExist", err)
	}
}

// DeleteEndpointOf deletes an entry only when it points at the caller's veth.
func TestPrivilegedDeleteEndpointOf(t *testing.T) {
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	ip := netip.MustParseAddr("10.244.1.5")
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	if err := d.UpsertEndpoint(ip, EndpointInfo{IfIndex: 7, PodMAC: mac, HostMAC: mac, ID: 3}); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteEndpointOf(ip, 8); !errors.Is(err, ErrEndpointNotOwned) {
		t.Errorf("DeleteEndpointOf(another veth) = %v, want ErrEndpointNotOwned", err)
	}
	if ep, ok, err := d.Endpoint(ip); err != nil || !ok || ep.IfIndex != 7 || ep.ID != 3 {
		t.Errorf("after a foreign delete: Endpoint = %+v, %v, %v; want ifindex 7, id 3", ep, ok, err)
	}
	if err := d.DeleteEndpointOf(ip, 7); err != nil {
		t.Errorf("DeleteEndpointOf(its veth) = %v, want nil", err)
	}
	if _, ok, err := d.Endpoint(ip); err != nil || ok {
		t.Errorf("after the owner's delete: Endpoint found = %v, %v; want none", ok, err)
	}
	if err := d.DeleteEndpointOf(ip, 7); err != nil {
		t.Errorf("DeleteEndpointOf(no entry) = %v, want nil", err)
	}
}

// EndpointProgramsAttached sees both programs on an attached veth and
// neither after DetachEndpoint.
func TestPrivilegedEndpointProgramsAttached(t *testing.T) {
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	inNetns(t, func(string) {
		veth, err := addVeth("myl00000000aa")
		if err != nil {
			t.Error(err)
			return
		}
		if from, to, err := d.EndpointProgramsAttached(veth); err != nil || from || to {
			t.Errorf("before attach: %v, %v, %v; want false, false", from, to, err)
		}
		if err := d.AttachEndpoint(veth, "myl00000000aa"); err != nil {
			t.Error(err)
			return
		}
		if from, to, err := d.EndpointProgramsAttached(veth); err != nil || !from || !to {
			t.Errorf("attached: %v, %v, %v; want true, true", from, to, err)
		}
		if err := d.DetachEndpoint(0, "myl00000000aa"); err != nil {
			t.Error(err)
		}
		if from, to, err := d.EndpointProgramsAttached(veth); err != nil || from || to {
			t.Errorf("detached: %v, %v, %v; want false, false", from, to, err)
		}
	})
}
