package datapath

import (
	"fmt"
	"os"
	"path/filepath"
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

// expectEgress checks that prog is the one program on ifindex's TCX egress.
func expectEgress(ifindex int, prog *ebpf.Program) error {
	progs, err := attachedTCXHook(ifindex, ebpf.AttachTCXEgress)
	if err != nil {
		return err
	}
	info, err := prog.Info()
	if err != nil {
		return err
	}
	id, _ := info.ID()
	if len(progs) != 1 || progs[0].ID != id {
		return fmt.Errorf("ifindex %d egress runs %+v, want only program %d", ifindex, progs, id)
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
	for _, pin := range []string{"netdev-dpnet0", "ep-myl0123abcd", "ep-egress-myl0123abcd"} {
		if _, err := os.Stat(filepath.Join(dir, "links", pin)); err != nil {
			return fmt.Errorf("link pin: %w", err)
		}
	}
	netdevLink, err := expectOnly(uplink, d1.objs.MyelinFromNetdev)
	if err != nil {
		return err
	}
	if _, err := expectOnly(veth, d1.objs.MyelinFromPod); err != nil {
		return err
	}
	if err := expectEgress(veth, d1.objs.MyelinToPod); err != nil {
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
	if _, err := expectOnly(veth, d2.objs.MyelinFromPod); err != nil {
		return fmt.Errorf("after restart: %w", err)
	}
	if err := expectEgress(veth, d2.objs.MyelinToPod); err != nil {
		return fmt.Errorf("after restart: %w", err)
	}
	return recreatedVeth(d2, veth)
}

// recreatedVeth replaces the pod veth (new ifindex, same name): the stale
// pinned link is replaced; then DetachEndpoint removes it, twice harmlessly.
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
	if _, err := expectOnly(veth, d.objs.MyelinFromPod); err != nil {
		return fmt.Errorf("recreated veth: %w", err)
	}
	for i := 0; i < 2; i++ {
		if err := d.DetachEndpoint("myl0123abcd"); err != nil {
			return fmt.Errorf("detach #%d: %w", i+1, err)
		}
	}
	for _, hook := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
		progs, err := attachedTCXHook(veth, hook)
		if err != nil {
			return err
		}
		if len(progs) != 0 {
			return fmt.Errorf("programs still attached after DetachEndpoint: %+v", progs)
		}
	}
	for _, pin := range []string{"ep-myl0123abcd", "ep-egress-myl0123abcd"} {
		if _, err := os.Stat(filepath.Join(d.cfg.PinDir, "links", pin)); !os.IsNotExist(err) {
			return fmt.Errorf("link pin %s still there after DetachEndpoint: %v", pin, err)
		}
	}
	return nil
}
