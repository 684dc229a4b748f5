package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A pod's host veth carries its two programs as cls_bpf filters of a clsact qdisc,
// not as TCX links like the node's devices: every TCX attach, update and detach
// waits for an RCU grace period while holding RTNL (5-16 ms each on a 2-vCPU VM), so
// two TCX links made CNI ADD pay ~20 ms and an agent restart one grace period per pod
// per hook; a filter is added or replaced in well under a millisecond. The veth is
// myelin's alone, so TCX's multi-program ownership buys nothing there. The filters go
// away with the device; nothing is pinned.

// podFilterPrio and podFilterHandle identify myelin's filter on each clsact hook of a
// pod's host veth: replacing the filter with them swaps the program atomically.
const (
	podFilterPrio   = 1
	podFilterHandle = 1
)

// attachClsBPF runs prog as the direct-action cls_bpf filter of the clsact hook
// parent (netlink.HANDLE_MIN_INGRESS or HANDLE_MIN_EGRESS) of ifindex, adding the
// clsact qdisc if the device has none and replacing myelin's filter in place if there
// is one: no moment without a program.
func attachClsBPF(prog *ebpf.Program, ifindex int, parent uint32, name string) error {
	qdisc := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0),
			Parent: netlink.HANDLE_CLSACT},
		QdiscType: "clsact",
	}
	if err := netlink.QdiscAdd(qdisc); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add clsact qdisc to %s (ifindex %d): %w", name, ifindex, err)
	}
	filter := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: ifindex, Parent: parent,
			Handle: podFilterHandle, Priority: podFilterPrio, Protocol: unix.ETH_P_ALL},
		Fd: prog.FD(), Name: progName(prog), DirectAction: true,
	}
	if err := netlink.FilterReplace(filter); err != nil {
		return fmt.Errorf("attach %s to %s (ifindex %d): %w", filter.Name, name, ifindex, err)
	}
	return nil
}

// detachClsBPF removes myelin's filter from the clsact hook parent of ifindex. No
// error if the device or the filter is gone.
func detachClsBPF(ifindex int, parent uint32) error {
	filter := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: ifindex,
		Parent: parent, Handle: podFilterHandle, Priority: podFilterPrio, Protocol: unix.ETH_P_ALL}}
	err := netlink.FilterDel(filter)
	if err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) ||
		errors.Is(err, unix.EINVAL) {
		return nil
	}
	return fmt.Errorf("detach the filter of ifindex %d: %w", ifindex, err)
}

// clsBPFAttached reports whether prog is a cls_bpf filter on the clsact hook parent
// of ifindex.
func clsBPFAttached(prog *ebpf.Program, ifindex int, parent uint32) (bool, error) {
	id, err := progID(prog)
	if err != nil {
		return false, err
	}
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return false, fmt.Errorf("query filters of ifindex %d: %w", ifindex, err)
	}
	filters, err := netlink.FilterList(l, parent)
	if err != nil {
		return false, fmt.Errorf("query filters of ifindex %d: %w", ifindex, err)
	}
	for _, f := range filters {
		if bf, ok := f.(*netlink.BpfFilter); ok && bf.Id == int(id) {
			return true, nil
		}
	}
	return false, nil
}

// progID returns the kernel's id of a loaded program.
func progID(prog *ebpf.Program) (ebpf.ProgramID, error) {
	if prog == nil {
		return 0, errors.New("query attached programs: no programs loaded")
	}
	info, err := prog.Info()
	if err != nil {
		return 0, fmt.Errorf("query program info: %w", err)
	}
	id, ok := info.ID()
	if !ok {
		return 0, errors.New("query program id: not supported by this kernel")
	}
	return id, nil
}

// progName is the name a filter shows in `tc filter show`.
func progName(prog *ebpf.Program) string {
	if info, err := prog.Info(); err == nil && info.Name != "" {
		return info.Name
	}
	return "myelin"
}
