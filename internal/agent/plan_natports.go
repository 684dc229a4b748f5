package agent

import (
	"fmt"

	"github.com/myelin-net/myelin/internal/config"
)

// minNATPorts is the fewest NAT ports auto accepts: the concurrent flows
// towards one destination (address, port, protocol) per node.
const minNATPorts = 1024

// natPorts decides the ports masquerade and NodePort SNAT translate to: the
// nat-port-range key, or with auto (zero) the ports above the node's
// ephemeral range. Either way they never overlap the ephemeral range, so a
// translated flow can't take a tuple a node socket may own.
func natPorts(want, ephemeral config.PortRange) (config.PortRange, error) {
	if want.IsZero() {
		if 65535-int(ephemeral.Max) < minNATPorts {
			return config.PortRange{}, fmt.Errorf("nat-port-range auto: the node's ephemeral ports %v (net.ipv4.ip_local_port_range) leave fewer than %d ports above them; set nat-port-range to a range outside %v, or lower the range's upper end",
				ephemeral, minNATPorts, ephemeral)
		}
		return config.PortRange{Min: ephemeral.Max + 1, Max: 65535}, nil
	}
	if want.Overlaps(ephemeral) {
		return config.PortRange{}, fmt.Errorf("nat-port-range %v overlaps the node's ephemeral ports %v (net.ipv4.ip_local_port_range): translated flows could take a node socket's tuple; set nat-port-range outside %v, or auto",
			want, ephemeral, ephemeral)
	}
	return want, nil
}
