package config

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/myelin-net/myelin/internal/flowmetrics"
	"github.com/myelin-net/myelin/internal/maglev"
	"github.com/myelin-net/myelin/internal/memlimit"
)

// key is one configuration key: its default and how to parse it into a Config.
type key struct {
	name  string
	def   string
	parse func(c *Config, v string) error
}

// clusterWide reports whether the key must be equal on every node: a NodeConfig may
// not set it.
func (k key) clusterWide() bool { return clusterWideKeys[k.name] }

// clusterWideKeys are the keys whose values must agree across the cluster.
var clusterWideKeys = map[string]bool{
	"cluster-cidr": true, "routing-mode": true, "tunnel-protocol": true, "tunnel-port": true,
	"ipv4-native-routing-cidr": true, "lb-algorithm": true, "maglev-table-size": true,
	"cluster-health-port": true,
}

// tunnelClusterWideKeys must be equal on every node in tunnel mode only (a NodeConfig
// may set them with routing-mode native), each with the reason.
// enable-source-ip-verification: in tunnel mode a node names a pod of another node as
// the payer of what it opens (its NetworkPolicy connection budget), and lets pod
// addresses in from the node owning their PodCIDR, on the word of that node's source
// check, which a node with the check off would not have made (lib/endpoint.h
// endpoint_vouched; the programs vouch for nobody while their own node's check is
// off, so an equal setting on every node is enough). The bench compares nodes with
// and without the check in native routing.
var tunnelClusterWideKeys = map[string]string{
	"enable-source-ip-verification": "each node trusts the others' check of the pod sources they tunnel to it",
}

var keys = []key{
	{"cluster-cidr", "10.244.0.0/16", func(c *Config, v string) (err error) {
		c.ClusterCIDR, err = parseCIDR(v)
		return err
	}},
	{"routing-mode", "tunnel", func(c *Config, v string) (err error) {
		c.RoutingMode, err = oneOf(v, RoutingNative, RoutingTunnel)
		return err
	}},
	{"tunnel-protocol", "vxlan", func(c *Config, v string) (err error) {
		c.TunnelProtocol, err = oneOf(v, "vxlan", "geneve")
		return err
	}},
	{"tunnel-port", "8472", func(c *Config, v string) error {
		p, err := strconv.ParseUint(v, 10, 16)
		if err != nil || p == 0 {
			return fmt.Errorf("must be a UDP port number (1-65535)")
		}
		c.TunnelPort = uint16(p)
		return nil
	}},
	{"enable-bpf-tunnel", "true", func(c *Config, v string) (err error) {
		c.EnableBPFTunnel, err = parseBool(v)
		return err
	}},
	{"auto-direct-node-routes", "false", func(c *Config, v string) (err error) {
		c.AutoDirectNodeRoutes, err = parseBool(v)
		return err
	}},
	{"ipv4-native-routing-cidr", "", func(c *Config, v string) (err error) {
		if v == "" {
			return nil
		}
		c.IPv4NativeRoutingCIDR, err = parseCIDR(v)
		return err
	}},
	{"host-routing", "auto", func(c *Config, v string) (err error) {
		c.HostRouting, err = oneOf(v, HostRoutingAuto, HostRoutingBPF, HostRoutingLegacy)
		return err
	}},
	{"enable-ipv4-masquerade", "true", func(c *Config, v string) (err error) {
		c.EnableIPv4Masquerade, err = parseBool(v)
		return err
	}},
	{"enable-bpf-masquerade", "true", func(c *Config, v string) (err error) {
		c.EnableBPFMasquerade, err = parseBool(v)
		return err
	}},
	{"non-masquerade-cidrs", "", func(c *Config, v string) error {
		c.NonMasqueradeCIDRs = nil
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			p, err := parseCIDR(s)
			if err != nil {
				return fmt.Errorf("%q: %v", s, err)
			}
			c.NonMasqueradeCIDRs = append(c.NonMasqueradeCIDRs, p)
		}
		return nil
	}},
	{"user-iptables-guard", "refuse", func(c *Config, v string) (err error) {
		c.UserIPTablesGuard, err = oneOf(v, GuardRefuse, GuardWarn, GuardOff)
		return err
	}},
	{"kube-proxy-replacement", "true", func(c *Config, v string) (err error) {
		c.KubeProxyReplacement, err = parseBool(v)
		return err
	}},
	{"bpf-lb-sock", "false", func(c *Config, v string) (err error) {
		c.BPFLBSock, err = parseBool(v)
		return err
	}},
	{"kube-proxy-replacement-healthz-bind-address", "", func(c *Config, v string) (err error) {
		c.KubeProxyHealthzAddr, err = parseListenAddr(v, "0.0.0.0:10256")
		return err
	}},
	{"kube-proxy-replacement-metrics-bind-address", "", func(c *Config, v string) (err error) {
		c.KubeProxyMetricsAddr, err = parseListenAddr(v, "127.0.0.1:10249")
		return err
	}},
	{"cgroup-root", "", func(c *Config, v string) error {
		if v != "" && !strings.HasPrefix(v, "/") {
			return fmt.Errorf("must be an absolute path to a cgroup v2 directory (e.g. /sys/fs/cgroup), or empty for the cgroup2 mount")
		}
		c.CgroupRoot = v
		return nil
	}},
	{"lb-algorithm", "random", func(c *Config, v string) (err error) {
		c.LBAlgorithm, err = oneOf(v, LBRandom, LBMaglev)
		return err
	}},
	{"maglev-table-size", "16381", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 251 || n > 131071 || !maglev.IsPrime(n) {
			return fmt.Errorf("must be a prime between 251 and 131071 (e.g. 16381, 65521)")
		}
		c.MaglevTableSize = n
		return nil
	}},
	{"enable-source-ip-verification", "true", func(c *Config, v string) (err error) {
		c.EnableSourceIPVerification, err = parseBool(v)
		return err
	}},
	{"pod-source-from-hosts", "auto", func(c *Config, v string) (err error) {
		c.PodSourceFromHosts, err = oneOf(v, PodSourceFromHostsAuto, PodSourceFromHostsDrop, PodSourceFromHostsAllow)
		return err
	}},
	{"tunnel-pod-to-node", "plain", func(c *Config, v string) (err error) {
		c.TunnelPodToNode, err = oneOf(v, TunnelPodToNodePlain, TunnelPodToNodeEncapsulate, TunnelPodToNodeEnforce)
		return err
	}},
	{"enable-ipv4-big-tcp", "false", func(c *Config, v string) (err error) {
		c.EnableIPv4BIGTCP, err = parseBool(v)
		return err
	}},
	{"enable-hubble", "true", func(c *Config, v string) (err error) {
		c.EnableHubble, err = parseBool(v)
		return err
	}},
	{"hubble-event-buffer-capacity", "4095", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1<<20 {
			return fmt.Errorf("must be a number of flows between 1 and 1048576 (default 4095)")
		}
		c.HubbleEventBufferCapacity = n
		return nil
	}},
	{"hubble-listen-address", "", func(c *Config, v string) (err error) {
		c.HubbleListenAddress, err = parseListenAddr(v, ":4244")
		return err
	}},
	{"hubble-tls-cert-file", "", func(c *Config, v string) error {
		c.HubbleTLSCertFile = v
		return nil
	}},
	{"hubble-tls-key-file", "", func(c *Config, v string) error {
		c.HubbleTLSKeyFile = v
		return nil
	}},
	{"hubble-tls-client-ca-files", "", func(c *Config, v string) error {
		c.HubbleTLSClientCAFiles = commaList(v)
		return nil
	}},
	{"hubble-tls-client-names", "", func(c *Config, v string) error {
		c.HubbleTLSClientNames = commaList(v)
		return nil
	}},
	{"nat-port-range", "auto", func(c *Config, v string) (err error) {
		c.NATPortRange, err = parsePortRange(v)
		return err
	}},
	{"nodeport-nat-syn-max", "16384", func(c *Config, v string) (err error) {
		c.NodePortNATSynMax, err = parseTableSize(v, 16, 1<<22)
		return err
	}},
	{"nodeport-nat-max", "65536", func(c *Config, v string) (err error) {
		c.NodePortNATMax, err = parseTableSize(v, 16, 1<<22)
		return err
	}},
	{"nodeport-nat-udp-max", "65536", func(c *Config, v string) (err error) {
		c.NodePortNATUDPMax, err = parseTableSize(v, 16, 1<<22)
		return err
	}},
	{"policy-ct-max", "131072", func(c *Config, v string) (err error) {
		c.PolicyCTMax, err = parseTableSize(v, 1024, 1<<22)
		return err
	}},
	{"policy-ct-pod-max", "auto", func(c *Config, v string) (err error) {
		c.PolicyCTPodMax, err = parsePodBudget(v, "a quarter of policy-ct-max", "entries")
		return err
	}},
	{"nat-pod-max", "auto", func(c *Config, v string) (err error) {
		c.NATPodMax, err = parsePodBudget(v, "8192, a quarter of the masquerade table", "flows")
		return err
	}},
	{"lb-ct-pod-max", "auto", func(c *Config, v string) (err error) {
		c.LBCTPodMax, err = parsePodBudget(v, "32768, a quarter of the Service conntrack table", "flows")
		return err
	}},
	{"prometheus-serve-addr", ":9962", func(c *Config, v string) (err error) {
		c.PrometheusServeAddr, err = parseListenAddr(v, ":9962")
		return err
	}},
	{"hubble-metrics-server", ":9965", func(c *Config, v string) (err error) {
		c.HubbleMetricsServer, err = parseListenAddr(v, ":9965")
		return err
	}},
	{"hubble-metrics", "dns,drop,tcp,flow,icmp,port-distribution", func(c *Config, v string) (err error) {
		c.HubbleMetrics, err = flowmetrics.ParseFamilies(v)
		return err
	}},
	{"mtu", "0", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || (n != 0 && (n < 1280 || n > 65535)) {
			return fmt.Errorf("must be 0 (detect from the uplink) or between 1280 and 65535")
		}
		c.MTU = n
		return nil
	}},
	{"memory-limit", "auto", func(c *Config, v string) (err error) {
		c.MemoryLimit, err = memlimit.Parse(v)
		return err
	}},
	{"cluster-health-port", "4240", func(c *Config, v string) error {
		p, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			return fmt.Errorf("must be a TCP port number (1-65535), or 0 to turn node health probing off")
		}
		c.ClusterHealthPort = int(p)
		return nil
	}},
}

func keyByName(name string) (key, bool) {
	for _, k := range keys {
		if k.name == name {
			return k, true
		}
	}
	return key{}, false
}

func keyNames() string {
	var names []string
	for _, k := range keys {
		names = append(names, k.name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func oneOf[T ~string](v string, allowed ...T) (T, error) {
	var names []string
	for _, a := range allowed {
		if string(a) == v {
			return a, nil
		}
		names = append(names, string(a))
	}
	return "", fmt.Errorf("must be one of %s", strings.Join(names, ", "))
}

func parseBool(v string) (bool, error) {
	switch v {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("must be true or false")
}

func parseCIDR(v string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(v)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("must be an IPv4 CIDR such as 10.0.0.0/8")
	}
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Errorf("has host bits set; did you mean %v?", p.Masked())
	}
	return p, nil
}

// parsePortRange parses nat-port-range: "auto" (the zero PortRange) or MIN-MAX.
func parsePortRange(v string) (PortRange, error) {
	if v == "auto" {
		return PortRange{}, nil
	}
	lo, hi, ok := strings.Cut(v, "-")
	min, err1 := strconv.ParseUint(lo, 10, 16)
	max, err2 := strconv.ParseUint(hi, 10, 16)
	if !ok || err1 != nil || err2 != nil || min < 1024 || min > max || max-min+1 < 1024 {
		return PortRange{}, fmt.Errorf("must be auto or MIN-MAX with 1024 <= MIN <= MAX <= 65535 and at least 1024 ports, outside the node's net.ipv4.ip_local_port_range (e.g. 61000-65535)")
	}
	return PortRange{Min: uint16(min), Max: uint16(max)}, nil
}

// parseTableSize parses a BPF table size in entries, between min and max.
func parseTableSize(v string, min, max int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		return 0, fmt.Errorf("must be a number of entries between %d and %d", min, max)
	}
	return n, nil
}

// parsePodBudget parses a per-pod budget of a shared table: "auto" (PodMaxAuto), 0
// (no budget) or a number of what up to 2^22.
func parsePodBudget(v string, autoMeans, what string) (int, error) {
	if v == "auto" {
		return PodMaxAuto, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 1<<22 {
		return 0, fmt.Errorf(`must be "auto" (%s), 0 (no budget) or a number of %s up to %d`, autoMeans, what, 1<<22)
	}
	return n, nil
}

// parseListenAddr parses a listen address of the agent's servers: "" (off), ":PORT" (every
// address) or "HOST:PORT" with an IP address or localhost; example is the key's default.
func parseListenAddr(v, example string) (string, error) {
	if v == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(v)
	p, perr := strconv.ParseUint(port, 10, 16)
	if err != nil || perr != nil || p == 0 {
		return "", fmt.Errorf("must be \"\" (off), :PORT or HOST:PORT such as %s", example)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil && host != "localhost" {
			return "", fmt.Errorf("host %q must be an IP address or localhost (e.g. 127.0.0.1%s, or %s for every address)", host, example, example)
		}
	}
	return v, nil
}

// commaList splits a comma-separated list, dropping spaces around items and empty items.
func commaList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
