package agent

import (
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/myelin-net/myelin/internal/link"
)

// bigTCPState is enable-ipv4-big-tcp on this node: the key and, once startDatapath
// has set the node's devices, the IPv4 GSO/GRO size new pods' veths get (0: the
// kernel's 64 KiB), the devices set to it, or why it stays off.
type bigTCPState struct {
	Enabled bool
	Size    int
	Devices []string
	Reason  string
}

// decideBIGTCP is the IPv4 BIG TCP size every device of devs can take (the
// smallest of theirs), or 0 with the reason of the first that can't take any.
func decideBIGTCP(devs []netlink.Link) (int, string) {
	size := link.BIGTCPIPv4Size
	for _, d := range devs {
		s, why := link.BIGTCPIPv4(d)
		if s == 0 {
			return 0, why
		}
		size = min(size, s)
	}
	return size, ""
}

// setBIGTCP applies enable-ipv4-big-tcp to the node's devices in the pods' path (the
// uplink and, in tunnel mode, the overlay): on, each gets the size all can take;
// off, or when one can't or refuses, they get 64 KiB back. A device that can't is
// no error: the node keeps going with the kernel's sizes and the reason in status.
func (s *startup) setBIGTCP(overlay netlink.Link) bigTCPState {
	st := s.plan.BIGTCP
	devs, err := currentLinks(s.uplink, overlay)
	if err != nil {
		st.Reason = err.Error()
		s.log.Warn("IPv4 BIG TCP stays off", "key", "enable-ipv4-big-tcp", "reason", st.Reason)
		return st
	}
	size, why := 0, "enable-ipv4-big-tcp is false"
	if st.Enabled {
		size, why = decideBIGTCP(devs)
	}
	for _, d := range devs {
		if size == 0 {
			break
		}
		if err := link.SetIPv4GSOGRO(nil, d, size); err != nil {
			size, why = 0, err.Error()
		}
		st.Devices = append(st.Devices, d.Attrs().Name)
	}
	if size > 0 {
		st.Size = size
		s.log.Info("IPv4 BIG TCP on", "size", size, "devices", st.Devices)
		return st
	}
	st.Devices = nil
	if err := resetBIGTCP(devs); err != nil {
		why += "; " + err.Error()
	}
	if st.Enabled {
		st.Reason = why
		s.log.Warn("IPv4 BIG TCP stays off: new pods get 64 KiB", "key", "enable-ipv4-big-tcp", "reason", why)
	}
	return st
}

// currentLinks reads the devices again (their sizes may have changed since start),
// leaving out a nil one.
func currentLinks(devs ...netlink.Link) ([]netlink.Link, error) {
	var out []netlink.Link
	for _, d := range devs {
		if d == nil {
			continue
		}
		l, err := netlink.LinkByIndex(d.Attrs().Index)
		if err != nil {
			return nil, fmt.Errorf("read device %s: %w", d.Attrs().Name, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// resetBIGTCP gives the devices with more than 64 KiB (BIG TCP on before) 64 KiB back.
func resetBIGTCP(devs []netlink.Link) error {
	for _, d := range devs {
		a := d.Attrs()
		if a.GSOIPv4MaxSize <= link.LegacyGSOMaxSize && a.GROIPv4MaxSize <= link.LegacyGSOMaxSize {
			continue
		}
		if err := link.SetIPv4GSOGRO(nil, d, link.LegacyGSOMaxSize); err != nil {
			return err
		}
	}
	return nil
}
