package tunnel

import (
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/testenv"
)

// With legacy host routing the stack routes pods' packets: SyncPodToNode puts a rule
// from the node's PodCIDR to NodeTable and there an encap route per receiver into
// the overlay, follows the receivers and a changed PodCIDR, and removes both when off.
func TestPrivilegedSyncPodToNode(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace: run as root (make test does)")
	}
	testenv.InNetns(t, "tunneltest-", func(string) {
		dev, err := EnsureDevice(8472, 1500, []byte{0x02, 0x6d, 192, 0, 2, 10})
		if err != nil {
			t.Errorf("EnsureDevice: %v", err)
			return
		}
		if err := netlink.LinkSetUp(dev); err != nil {
			t.Errorf("up: %v", err)
			return
		}
		podCIDR := netip.MustParsePrefix("10.244.1.0/24")
		n2, n3 := netip.MustParseAddr("198.18.0.12"), netip.MustParseAddr("198.18.0.13")
		check := func(step string, wantRuleFrom string, wantRoutes ...netip.Addr) {
			t.Helper()
			rules, err := netlink.RuleListFiltered(unix.AF_INET, &netlink.Rule{Table: NodeTable}, netlink.RT_FILTER_TABLE)
			if err != nil {
				t.Fatal(err)
			}
			var from []string
			for _, r := range rules {
				if r.Priority != NodeRulePriority {
					t.Errorf("%s: rule %v has priority %d, want %d", step, r, r.Priority, NodeRulePriority)
				}
				from = append(from, r.Src.String())
			}
			if want := []string{wantRuleFrom}; (wantRuleFrom == "" && len(from) != 0) || (wantRuleFrom != "" && !slices.Equal(from, want)) {
				t.Errorf("%s: rules to table %d from %v, want %q", step, NodeTable, from, wantRuleFrom)
			}
			routes, err := netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: NodeTable}, netlink.RT_FILTER_TABLE)
			if err != nil {
				t.Fatal(err)
			}
			var got []netip.Addr
			for _, r := range routes {
				ip, _ := netip.AddrFromSlice(r.Dst.IP.To4())
				got = append(got, ip)
				if r.LinkIndex != dev.Attrs().Index || r.MTU != 1450 {
					t.Errorf("%s: route %v: dev %d mtu %d, want %s at 1450", step, r.Dst, r.LinkIndex, r.MTU, DeviceName)
				}
				// netlink does not decode the lightweight-tunnel encap: ip does.
				out, err := exec.Command("ip", "-4", "route", "show", "table", strconv.Itoa(NodeTable), ip.String()).CombinedOutput()
				if err != nil || !strings.Contains(string(out), "encap ip id 0 src 0.0.0.0 dst "+ip.String()+" ") {
					t.Errorf("%s: ip route show table %d %s: %v %q, want an encap to %s", step, NodeTable, ip, err, out, ip)
				}
			}
			slices.SortFunc(got, netip.Addr.Compare)
			if !slices.Equal(got, wantRoutes) {
				t.Errorf("%s: routes in table %d to %v, want %v", step, NodeTable, got, wantRoutes)
			}
		}
		sync := func(cidr netip.Prefix, on bool, receivers ...netip.Addr) {
			t.Helper()
			if err := SyncPodToNode(dev, cidr, receivers, 1450, on); err != nil {
				t.Fatal(err)
			}
		}
		sync(podCIDR, true, n2, n3)
		check("two receivers", "10.244.1.0/24", n2, n3)
		routeGet(t, n3)
		sync(podCIDR, true, n2, n3)
		check("the same again", "10.244.1.0/24", n2, n3)
		sync(podCIDR, true, n3)
		check("node-2 gone", "10.244.1.0/24", n3)
		sync(netip.MustParsePrefix("10.244.7.0/24"), true, n3)
		check("the PodCIDR changed", "10.244.7.0/24", n3)
		sync(podCIDR, false, n3)
		check("off", "")
		sync(podCIDR, true, n3)
		if err := SyncPodToNode(nil, netip.Prefix{}, nil, 0, false); err != nil { // as the agent's cleanup calls it
			t.Fatal(err)
		}
		check("cleanup", "")
	})
}

// routeGet checks the kernel's decisions with the rule in place: a pod's packet to
// receiver ip, arriving on its veth, takes table 2030 into the overlay; the node's own
// to ip (from the uplink's address) takes the main table.
func routeGet(t *testing.T, ip netip.Addr) {
	t.Helper()
	for _, argv := range [][]string{
		{"ip", "link", "add", "vpod0", "type", "veth", "peer", "name", "vpod1"},
		{"ip", "link", "add", "vup0", "type", "veth", "peer", "name", "vup1"},
		{"ip", "addr", "add", "198.18.0.11/24", "dev", "vup0"},
		{"ip", "link", "set", "vpod0", "up"}, {"ip", "link", "set", "vup0", "up"},
		{"ip", "route", "add", "10.244.1.5/32", "dev", "vpod0"},
		{"sysctl", "-qw", "net.ipv4.conf.all.forwarding=1"}, {"sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0"},
		{"sysctl", "-qw", "net.ipv4.conf.vpod0.rp_filter=0"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v %s", strings.Join(argv, " "), err, out)
		}
	}
	out, err := exec.Command("ip", "-o", "route", "get", ip.String(), "from", "10.244.1.5", "iif", "vpod0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dev "+DeviceName) || !strings.Contains(string(out), "table "+strconv.Itoa(NodeTable)) {
		t.Errorf("ip route get %s from a pod: %v %q, want table %d into %s", ip, err, out, NodeTable, DeviceName)
	}
	out, err = exec.Command("ip", "-o", "route", "get", ip.String()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dev vup0") {
		t.Errorf("ip route get %s from the node itself: %v %q, want the main table's route out of the uplink", ip, err, out)
	}
}
