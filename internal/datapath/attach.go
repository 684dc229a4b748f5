package datapath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// AttachNetdev attaches myelin_from_netdev to TCX ingress of the node
// uplink ifindex (in the caller's network namespace), pinning the link at
// <PinDir>/links/netdev-<name>. If that pinned link exists and is attached
// to ifindex, its program is replaced in place: atomic, no gap in which
// packets miss the datapath. A stale pinned link (device gone or renamed) is
// replaced by a fresh attachment.
func (d *Datapath) AttachNetdev(ifindex int, name string) error {
	return d.attach(d.objs.MyelinFromNetdev, ebpf.AttachTCXIngress, ifindex, "netdev-", name)
}

// AttachToNetdev attaches myelin_to_netdev to TCX egress of the node uplink
// ifindex (in the caller's network namespace), where BPF masquerade
// translates pod traffic leaving the cluster, pinning the link at
// <PinDir>/links/to-netdev-<name>, with the same in-place update as
// AttachNetdev. Attach it with AttachNetdev on the same device, which
// translates the replies back, and after SetNoMasquerade. With
// Config.Masquerade off the program passes every packet untouched.
func (d *Datapath) AttachToNetdev(ifindex int, name string) error {
	return d.attach(d.objs.MyelinToNetdev, ebpf.AttachTCXEgress, ifindex, "to-netdev-", name)
}

// AttachEndpoint runs myelin_from_pod on ingress of a pod's host-side veth
// and myelin_to_pod on its egress (where replies the stack delivers to
// service clients are translated back), as cls_bpf filters of a clsact qdisc
// (see attach_tc.go for why not TCX). Calling it again replaces the programs
// in place: atomic, no gap. It removes the TCX links an older agent pinned
// for the endpoint (ep-<name>, ep-egress-<name>) once the filters run.
func (d *Datapath) AttachEndpoint(ifindex int, name string) (err error) {
	defer func() {
		if err != nil {
			d.attachErrors.Add(1)
		}
	}()
	if ifindex <= 0 {
		return fmt.Errorf("attach to device %q: invalid ifindex %d", name, ifindex)
	}
	if err := attachClsBPF(d.objs.MyelinFromPod, ifindex, netlink.HANDLE_MIN_INGRESS, name); err != nil {
		return err
	}
	if err := attachClsBPF(d.objs.MyelinToPod, ifindex, netlink.HANDLE_MIN_EGRESS, name); err != nil {
		return err
	}
	return d.detachLegacyEndpointLinks(name)
}

// AttachOverlay attaches myelin_from_overlay to TCX ingress of the VXLAN
// device ifindex (myelin_vxlan, in the caller's network namespace), where
// decapsulated packets arrive, and myelin_to_overlay to its egress, where
// the replies of NodePort flows the node's own host serves to pods of other
// nodes are translated back before encapsulation; the links are pinned at
// <PinDir>/links/overlay-<name> and to-overlay-<name>, with the same
// in-place update as AttachNetdev. Attach it in both host routing modes: in
// legacy mode the ingress program only counts and hands packets to the stack.
func (d *Datapath) AttachOverlay(ifindex int, name string) error {
	if err := d.attach(d.objs.MyelinFromOverlay, ebpf.AttachTCXIngress, ifindex, "overlay-", name); err != nil {
		return err
	}
	return d.attach(d.objs.MyelinToOverlay, ebpf.AttachTCXEgress, ifindex, "to-overlay-", name)
}

// DetachEndpoint removes both programs from the host-side veth name at
// ifindex (in the caller's network namespace; ifindex 0: whichever link is
// called name) and any TCX links an older agent pinned for it. No error if
// there are none or the veth is gone: deleting the veth removes its filters
// too. A veth of that name at another index is another attachment of the
// container (a DEL and a new ADD raced an older call): it is left alone.
func (d *Datapath) DetachEndpoint(ifindex int, name string) error {
	if l, err := netlink.LinkByName(name); err == nil {
		idx := l.Attrs().Index
		if ifindex != 0 && idx != ifindex {
			return nil
		}
		if err := errors.Join(detachClsBPF(idx, netlink.HANDLE_MIN_INGRESS),
			detachClsBPF(idx, netlink.HANDLE_MIN_EGRESS)); err != nil {
			return fmt.Errorf("detach the programs of %s: %w", name, err)
		}
	}
	return d.detachLegacyEndpointLinks(name)
}

// detachLegacyEndpointLinks detaches and unpins the TCX links agents before
// the move to cls_bpf attached to the pod veth name.
func (d *Datapath) detachLegacyEndpointLinks(name string) error {
	if err := d.detach("ep-", name); err != nil {
		return err
	}
	return d.detach("ep-egress-", name)
}

// detach detaches and unpins the link pinned as prefix+name, if any.
func (d *Datapath) detach(prefix, name string) error {
	path, err := d.linkPath(prefix, name)
	if err != nil {
		return err
	}
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open pinned link %s: %w", path, err)
	}
	defer l.Close()
	// A link whose device is gone is already detached; Detach then fails harmlessly.
	_ = l.Detach()
	if err := l.Unpin(); err != nil {
		return fmt.Errorf("unpin link %s: %w", path, err)
	}
	return nil
}

// linkPath returns the pin path <PinDir>/links/<prefix><name>, rejecting
// device names that are not valid Linux interface names.
func (d *Datapath) linkPath(prefix, name string) (string, error) {
	if name == "" || name == "." || name == ".." || len(name) > unix.IFNAMSIZ-1 ||
		strings.ContainsAny(name, "/\x00 ") {
		return "", fmt.Errorf("pin link for device %q: not a valid interface name", name)
	}
	return filepath.Join(d.cfg.PinDir, "links", prefix+name), nil
}

// attach runs prog on TCX hook (ingress or egress) of ifindex through the
// link pinned as prefix+name.
func (d *Datapath) attach(prog *ebpf.Program, hook ebpf.AttachType, ifindex int, prefix, name string) (err error) {
	defer func() {
		if err != nil {
			d.attachErrors.Add(1)
		}
	}()
	if ifindex <= 0 {
		return fmt.Errorf("attach to device %q: invalid ifindex %d", name, ifindex)
	}
	path, err := d.linkPath(prefix, name)
	if err != nil {
		return err
	}
	pinName := prefix + name
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create links dir: %w", err)
	}
	updated, err := updatePinnedLink(path, prog, ifindex)
	if err != nil || updated {
		return err
	}

	l, err := link.AttachTCX(link.TCXOptions{
		Interface: ifindex,
		Program:   prog,
		Attach:    hook,
	})
	if err != nil {
		return fmt.Errorf("attach %s to ifindex %d: %w", pinName, ifindex, err)
	}
	// Closing our fd after pinning keeps the link; without the pin it detaches.
	defer l.Close()
	if err := l.Pin(path); err != nil {
		return fmt.Errorf("pin link %s: %w", path, err)
	}
	return nil
}

// updatePinnedLink switches the link pinned at path to prog if it is
// attached to ifindex, and reports whether it did. A pinned link that can't
// be reused (device gone, name now on another device) is detached and
// unpinned so the caller attaches afresh.
func updatePinnedLink(path string, prog *ebpf.Program, ifindex int) (bool, error) {
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		if rmErr := os.Remove(path); rmErr != nil {
			return false, fmt.Errorf("remove unusable pin %s: %w (open: %v)", path, rmErr, err)
		}
		return false, nil
	}
	defer l.Close()
	if linkIfindex(l) == ifindex && l.Update(prog) == nil {
		return true, nil
	}
	_ = l.Detach()
	if err := l.Unpin(); err != nil {
		return false, fmt.Errorf("unpin stale link %s: %w", path, err)
	}
	return false, nil
}

// linkIfindex returns the device of a TCX link, 0 if unknown or detached.
func linkIfindex(l link.Link) int {
	info, err := l.Info()
	if err != nil {
		return 0
	}
	tcx := info.TCX()
	if tcx == nil {
		return 0
	}
	return int(tcx.Ifindex)
}

// DetachStaleDeviceLinks detaches and unpins the TCX links an earlier start pinned
// for node devices this start does not attach to: those of an uplink other than
// uplink (renamed or replaced: it would keep running the earlier program, and hold
// it and its maps, as long as the node runs), and with overlay false those of the
// VXLAN device (after a switch to native routing its pins would hold defunct links,
// and with them the earlier programs and maps). Call it after AttachNetdev and
// AttachOverlay. Pod links and socket-LB links are not touched.
func (d *Datapath) DetachStaleDeviceLinks(uplink string, overlay bool) error {
	entries, err := os.ReadDir(filepath.Join(d.cfg.PinDir, "links"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list pinned links: %w", err)
	}
	var errs []error
	for _, e := range entries {
		prefix, dev, stale := staleDeviceLink(e.Name(), uplink, overlay)
		if !stale {
			continue
		}
		if err := d.detach(prefix, dev); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// staleDeviceLink splits a link pin name into its prefix and device and says
// whether it is a node device's link this start does not attach (see
// DetachStaleDeviceLinks).
func staleDeviceLink(name, uplink string, overlay bool) (prefix, dev string, stale bool) {
	for _, prefix := range []string{"to-netdev-", "netdev-", "to-overlay-", "overlay-"} {
		dev, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		if strings.HasSuffix(prefix, "overlay-") {
			return prefix, dev, !overlay
		}
		return prefix, dev, dev != uplink
	}
	return "", "", false
}
