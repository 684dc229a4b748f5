package lab

import (
	"context"
	"fmt"
	"net"

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
// only the lab's routes.
func Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if _, err := net.InterfaceByName(labplan.ControlPlaneLink); err == nil {
		return dialThroughLab(ctx, network, addr)
	}
	if machine, _ := netns.IsMachine(); machine {
		return nil, fmt.Errorf("dial %s: the lab's link %s is not in the machine's network namespace (is the lab up? myelin lab up); "+
			"a lab address is not dialed through the machine's own routes, which lead off the machine", addr, labplan.ControlPlaneLink)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

var dialThroughLab = netns.DialThrough(labplan.ControlPlaneLink)
