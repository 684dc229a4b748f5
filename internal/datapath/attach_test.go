package datapath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
)

// addVeth creates an up veth pair and returns the ifindex of name.
func addVeth(name string) (int, error) {
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
		return 0, fmt.Errorf("add veth %s: %w", name, err)
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return 0, err
	}
	return l.Attrs().Index, netlink.LinkSetUp(l)
}

// attachedTCX lists the TCX ingress programs of ifindex.
func attachedTCX(ifindex int) ([]link.AttachedProgram, error) {
	return attachedTCXHook(ifindex, ebpf.AttachTCXIngress)
}

// attachedTCXHook lists the TCX programs of ifindex's hook (ingress or egress).
func attachedTCXHook(ifindex int, hook ebpf.AttachType) ([]link.AttachedProgram, error) {
	res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: hook})
	if err != nil {
		return nil, err
	}
	return res.Programs, nil
}

// podFilterProgs lists the program ids of the cls_bpf filters on the clsact
// hook parent of ifindex.
func podFilterProgs(ifindex int, parent uint32) ([]int, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return nil, err
	}
	filters, err := netlink.FilterList(l, parent)
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, f := range filters {
		if bf, ok := f.(*netlink.BpfFilter); ok {
			ids = append(ids, bf.Id)
		}
	}
	return ids, nil
}

// expectPodFilters checks that a pod veth runs d's myelin_from_pod as its one
// ingress filter and myelin_to_pod as its one egress filter, and no TCX
// program.
func expectPodFilters(ifindex int, d *Datapath) error {
	for _, c := range []struct {
		parent uint32
		prog   *ebpf.Program
		hook   ebpf.AttachType
	}{
		{netlink.HANDLE_MIN_INGRESS, d.objs.MyelinFromPod, ebpf.AttachTCXIngress},
		{netlink.HANDLE_MIN_EGRESS, d.objs.MyelinToPod, ebpf.AttachTCXEgress},
	} {
		id, err := progID(c.prog)
		if err != nil {
			return err
		}
		got, err := podFilterProgs(ifindex, c.parent)
		if err != nil {
			return err
		}
		if len(got) != 1 || got[0] != int(id) {
			return fmt.Errorf("ifindex %d hook %x runs filters %v, want only program %d", ifindex, c.parent, got, id)
		}
		if tcx, err := attachedTCXHook(ifindex, c.hook); err != nil || len(tcx) != 0 {
			return fmt.Errorf("ifindex %d runs TCX programs %+v (%v), want none", ifindex, tcx, err)
		}
	}
	return nil
}

// expectOnly checks that prog is the one program on ifindex's TCX ingress
// and returns its link id.
func expectOnly(ifindex int, prog *ebpf.Program) (link.ID, error) {
	progs, err := attachedTCX(ifindex)
	if err != nil {
		return 0, err
	}
	info, err := prog.Info()
	if err != nil {
		return 0, err
	}
	id, _ := info.ID()
	if len(progs) != 1 || progs[0].ID != id {
		return 0, fmt.Errorf("ifindex %d runs %+v, want only program %d", ifindex, progs, id)
	}
	linkID, _ := progs[0].LinkID()
	return linkID, nil
}

func TestPrivilegedAttachPinnedLink(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDir(t)
	defer func() {
		if err := Unpin(dir); err != nil {
			t.Error(err)
		}
	}()
	inNetns(t, func(string) {
		if err := attachScenario(dir); err != nil {
			t.Error(err)
		}
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) && err != nil {
		t.Error(err)
	}
}

// attachScenario attaches, restarts the agent (Close, Load, Attach: in-place
// update), survives a recreated veth and detaches, all in the current netns.
func attachScenario(dir string) error {
	uplink, err := addVeth("dpnet0")
	if err != nil {
		return err
	}
	veth, err := addVeth("myl0123abcd")
	if err != nil {
		return err
	}

	d1, err := Load(Config{PinDir: dir, HostRouting: HostRoutingBPF})
	if err != nil {
		return err
	}
	if err := d1.AttachNetdev(uplink, "dpnet0"); err != nil {
		return err
	}
	if err := d1.AttachEndpoint(veth, "myl0123abcd"); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "links", "netdev-dpnet0")); err != nil {
		return fmt.Errorf("link pin: %w", err)
	}
	netdevLink, err := expectOnly(uplink, d1.objs.MyelinFromNetdev)
	if err != nil {
		return err
	}
	if err := expectPodFilters(veth, d1); err != nil {
		return err
	}
	// The agent exits: the pinned links keep the programs attached.
	before, err := attachedTCX(uplink)
	if err != nil {
		return err
	}
	d1.Close()
	after, err := attachedTCX(uplink)
	if err != nil {
		return err
	}
	if len(after) != 1 || after[0].ID != before[0].ID {
		return fmt.Errorf("after Close uplink runs %+v, want %+v", after, before)
	}

	// Restart, switching host routing mode: the same links get the new programs.
	d2, err := Load(Config{PinDir: dir, HostRouting: HostRoutingLegacy})
	if err != nil {
		return err
	}
	defer d2.Close()
	if err := d2.AttachNetdev(uplink, "dpnet0"); err != nil {
		return err
	}
	if err := d2.AttachEndpoint(veth, "myl0123abcd"); err != nil {
		return err
	}
	got, err := expectOnly(uplink, d2.objs.MyelinFromNetdev)
	if err != nil {
		return fmt.Errorf("after restart: %w", err)
	}
	if got != netdevLink {
		return fmt.Errorf("netdev link id %d after restart, want %d (updated in place)", got, netdevLink)
	}
	if err := expectPodFilters(veth, d2); err != nil {
		return fmt.Errorf("after restart: %w", err)
	}
	return recreatedVeth(d2, veth)
}

// recreatedVeth replaces the pod veth (new ifindex, same name): the new one
// gets the programs, which a detach naming the old index leaves (a stale call
// of the container's earlier attachment); then DetachEndpoint removes them,
// twice harmlessly.
func recreatedVeth(d *Datapath, oldIndex int) error {
	old, err := netlink.LinkByIndex(oldIndex)
	if err != nil {
		return err
	}
	if err := netlink.LinkDel(old); err != nil {
		return err
	}
	veth, err := addVeth("myl0123abcd")
	if err != nil {
		return err
	}
	if err := d.AttachEndpoint(veth, "myl0123abcd"); err != nil {
		return fmt.Errorf("attach to recreated veth: %w", err)
	}
	if err := expectPodFilters(veth, d); err != nil {
		return fmt.Errorf("recreated veth: %w", err)
	}
	if err := d.DetachEndpoint(oldIndex, "myl0123abcd"); err != nil {
		return fmt.Errorf("detach the old index: %w", err)
	}
	if err := expectPodFilters(veth, d); err != nil {
		return fmt.Errorf("recreated veth after a detach of the old index %d: %w", oldIndex, err)
	}
	for i := 0; i < 2; i++ {
		if err := d.DetachEndpoint(veth, "myl0123abcd"); err != nil {
			return fmt.Errorf("detach #%d: %w", i+1, err)
		}
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		if progs, err := podFilterProgs(veth, parent); err != nil || len(progs) != 0 {
			return fmt.Errorf("filters still on the veth after DetachEndpoint: %v %v", progs, err)
		}
	}
	return nil
}

// An endpoint an older agent attached with pinned TCX links moves to the filters:
// AttachEndpoint adds them, then detaches and unpins the links, so the veth runs
// each program once.
func TestPrivilegedAttachEndpointReplacesTCXLinks(t *testing.T) {
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	inNetns(t, func(string) {
		veth, err := addVeth("myl00000000bb")
		if err != nil {
			t.Fatal(err)
		}
		if err := d.attach(d.objs.MyelinFromPod, ebpf.AttachTCXIngress, veth, "ep-", "myl00000000bb"); err != nil {
			t.Fatal(err)
		}
		if err := d.attach(d.objs.MyelinToPod, ebpf.AttachTCXEgress, veth, "ep-egress-", "myl00000000bb"); err != nil {
			t.Fatal(err)
		}
		if err := d.AttachEndpoint(veth, "myl00000000bb"); err != nil {
			t.Fatal(err)
		}
		if err := expectPodFilters(veth, d); err != nil {
			t.Error(err)
		}
		for _, pin := range []string{"ep-myl00000000bb", "ep-egress-myl00000000bb"} {
			if _, err := os.Stat(filepath.Join(d.cfg.PinDir, "links", pin)); !os.IsNotExist(err) {
				t.Errorf("the older agent's link pin %s is still there: %v", pin, err)
			}
		}
	})
}

// A new start on another uplink (renamed or replaced device) and without tunnel mode
// detaches and unpins the links an earlier start pinned for the old uplink and the
// VXLAN device: nothing else would, and the old uplink would keep running the old
// program, holding it and its maps, for as long as the node runs.
func TestPrivilegedDetachStaleDeviceLinks(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDir(t)
	defer Unpin(dir)
	inNetns(t, func(string) {
		if err := staleDeviceLinksScenario(dir); err != nil {
			t.Error(err)
		}
	})
}

func staleDeviceLinksScenario(dir string) error {
	old, err := addVeth("dpold0")
	if err != nil {
		return err
	}
	overlay, err := addVeth("dpvx0")
	if err != nil {
		return err
	}
	cur, err := addVeth("dpnew0")
	if err != nil {
		return err
	}
	d1, err := Load(Config{PinDir: dir, HostRouting: HostRoutingBPF})
	if err != nil {
		return err
	}
	err = errors.Join(d1.AttachNetdev(old, "dpold0"), d1.AttachToNetdev(old, "dpold0"), d1.AttachOverlay(overlay, "dpvx0"))
	d1.Close()
	if err != nil {
		return err
	}
	// The switch to native routing deletes the VXLAN device: its links go defunct.
	if err := netlink.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "dpvx0"}}); err != nil {
		return err
	}

	d2, err := Load(Config{PinDir: dir, HostRouting: HostRoutingBPF})
	if err != nil {
		return err
	}
	defer d2.Close()
	if err := errors.Join(d2.AttachNetdev(cur, "dpnew0"), d2.AttachToNetdev(cur, "dpnew0")); err != nil {
		return err
	}
	if progs, err := attachedTCX(old); err != nil || len(progs) != 1 {
		return fmt.Errorf("before DetachStaleDeviceLinks the old uplink runs %+v (%v), want the earlier start's program", progs, err)
	}
	if err := d2.DetachStaleDeviceLinks("dpnew0", false); err != nil {
		return err
	}
	for _, c := range []struct {
		ifindex int
		hook    ebpf.AttachType
		want    int
	}{
		{old, ebpf.AttachTCXIngress, 0}, {old, ebpf.AttachTCXEgress, 0},
		{cur, ebpf.AttachTCXIngress, 1}, {cur, ebpf.AttachTCXEgress, 1},
	} {
		if progs, err := attachedTCXHook(c.ifindex, c.hook); err != nil || len(progs) != c.want {
			return fmt.Errorf("ifindex %d hook %v runs %+v (%v), want %d programs", c.ifindex, c.hook, progs, err, c.want)
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, "links"))
	if err != nil {
		return err
	}
	var pins []string
	for _, e := range entries {
		pins = append(pins, e.Name())
	}
	if want := []string{"netdev-dpnew0", "to-netdev-dpnew0"}; !slices.Equal(pins, want) {
		return fmt.Errorf("link pins %v, want %v", pins, want)
	}
	return nil
}
