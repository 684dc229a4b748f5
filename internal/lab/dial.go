package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/netns"
)

// Dial dials addr for a lab process: its API clients and health probes. In the
// machine's network namespace it sends only through the lab's link there,
// labplan.ControlPlaneLink (netns.DialThrough): the machine's own routes lead off the
// machine, so a lab address they would reach is a packet leaving it (a node on the
// second segment of an L3 underlay, whose route only the lab's netns have; any lab
// address once the lab is down). There, without the link (the lab is down), it
// refuses. In a lab netns (the lab kubelet, node tools) it dials as usual: those have
// only the lab's routes; so does a loopback address anywhere.
func Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap().IsLoopback() {
			var d net.Dialer // never leaves the machine
			return d.DialContext(ctx, network, addr)
		}
	}
	if _, err := net.InterfaceByName(labplan.ControlPlaneLink); err == nil {
		return dialThroughLab(ctx, network, addr)
	}
	if machine, _ := isMachine(); machine {
		return nil, fmt.Errorf("dial %s: the lab's link %s is not in the machine's network namespace (is the lab up? myelin lab up); "+
			"a lab address is not dialed through the machine's own routes, which lead off the machine", addr, labplan.ControlPlaneLink)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

var dialThroughLab = netns.DialThrough(labplan.ControlPlaneLink)

// isMachine is netns.IsMachine (a test puts a scratch namespace in the machine's place).
var isMachine = netns.IsMachine
