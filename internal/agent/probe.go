package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/datapath"
)

// What the agent reads off the node, besides its Node object and uplink, before it
// decides its plan (plan.go stays pure): the node's ephemeral ports and whether the
// kernel runs the configured tunnel protocol.

// ephemeralPortsFile holds the agent's netns's ephemeral ports (read only:
// the agent never writes sysctls).
const ephemeralPortsFile = "/proc/sys/net/ipv4/ip_local_port_range"

// readEphemeralPorts reads net.ipv4.ip_local_port_range from path.
func readEphemeralPorts(path string) (config.PortRange, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return config.PortRange{}, fmt.Errorf("read the node's ephemeral ports: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return config.PortRange{}, fmt.Errorf("read the node's ephemeral ports: %s holds %q, want two ports", path, b)
	}
	lo, err1 := strconv.ParseUint(f[0], 10, 16)
	hi, err2 := strconv.ParseUint(f[1], 10, 16)
	if err1 != nil || err2 != nil || lo > hi {
		return config.PortRange{}, fmt.Errorf("read the node's ephemeral ports: %s holds %q, want two ports", path, b)
	}
	return config.PortRange{Min: uint16(lo), Max: uint16(hi)}, nil
}

// checkRoutingMode refuses a tunnel protocol this kernel cannot run, naming what is
// missing, before the agent changes anything on the node.
func checkRoutingMode(c config.Config) error {
	if c.RoutingMode != config.RoutingTunnel {
		return nil
	}
	if c.TunnelProtocol != "vxlan" {
		if err := datapath.ProbeTunnelProtocol(c.TunnelProtocol); err != nil {
			return fmt.Errorf("%w (set by %s); use tunnel-protocol vxlan", err, c.Source("tunnel-protocol"))
		}
		return fmt.Errorf("tunnel-protocol %s (set by %s) is not supported by this build; use vxlan", c.TunnelProtocol, c.Source("tunnel-protocol"))
	}
	return datapath.ProbeTunnelProtocol("vxlan")
}
