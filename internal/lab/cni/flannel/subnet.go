package flannel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// Subnet is what flanneld writes to its subnet file (subnet.env).
type Subnet struct {
	Network netip.Prefix // FLANNEL_NETWORK: the whole pod network
	Subnet  netip.Prefix // FLANNEL_SUBNET: this node's lease; the address is the bridge's (gateway)
	MTU     int          // FLANNEL_MTU: the pod MTU the backend leaves room for
	IPMasq  bool         // FLANNEL_IPMASQ: flanneld masquerades, so the bridge must not
}

// ParseSubnet reads a subnet.env. Lines are KEY=VALUE; unknown keys (IPv6) are
// ignored.
func ParseSubnet(b []byte) (Subnet, error) {
	var s Subnet
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		var err error
		switch key {
		case "FLANNEL_NETWORK":
			s.Network, err = netip.ParsePrefix(value)
		case "FLANNEL_SUBNET":
			s.Subnet, err = netip.ParsePrefix(value)
		case "FLANNEL_MTU":
			s.MTU, err = strconv.Atoi(value)
		case "FLANNEL_IPMASQ":
			s.IPMasq, err = strconv.ParseBool(value)
		default:
			continue
		}
		if err != nil {
			return Subnet{}, fmt.Errorf("flannel subnet file: %s=%q: %w", key, value, err)
		}
		seen[key] = true
	}
	for _, key := range []string{"FLANNEL_NETWORK", "FLANNEL_SUBNET", "FLANNEL_MTU"} {
		if !seen[key] {
			return Subnet{}, fmt.Errorf("flannel subnet file: no %s", key)
		}
	}
	return s, nil
}

// ConfList is the node's conflist: what flannel's CNI plugin would delegate to
// with kube-flannel's configuration (delegate hairpinMode and isDefaultGateway, then
// portmap). The bridge cni0 gets the subnet's first address as gateway, host-local
// hands out the rest of the node's subnet (leases under ipamDir, per node) with a route
// to the whole pod network, and the bridge masquerades only when flanneld doesn't.
func ConfList(s Subnet, ipamDir string) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       NetworkName,
		"plugins": []any{
			map[string]any{
				"type":             "bridge",
				"bridge":           Bridge,
				"isGateway":        true,
				"isDefaultGateway": true,
				"hairpinMode":      true,
				"ipMasq":           !s.IPMasq,
				"mtu":              s.MTU,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": s.Subnet.Masked().String()}}},
					"routes":  []map[string]string{{"dst": s.Network.String()}},
					"dataDir": ipamDir,
				},
			},
			map[string]any{
				"type":         "portmap",
				"capabilities": map[string]bool{"portMappings": true},
			},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// Leases maps each node of the plan to the subnet its flanneld leased, read from the
// node's subnet file; a node whose flanneld has not written one yet is missing.
// Flannel (with etcd as its store) picks its own per-node subnets, not the Nodes'
// PodCIDRs, so whatever must route to a node's pods follows these.
func Leases(p labplan.Plan, paths labplan.Paths) map[string]netip.Prefix {
	out := map[string]netip.Prefix{}
	for _, n := range p.Nodes {
		b, err := os.ReadFile(paths.FlannelSubnetFile(n.Name))
		if err != nil {
			continue
		}
		if s, err := ParseSubnet(b); err == nil {
			out[n.Name] = s.Subnet.Masked()
		}
	}
	return out
}
