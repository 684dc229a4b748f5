package labplan

import (
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/netns"
)

func TestOptionsValidate(t *testing.T) {
	ok := DefaultOptions()
	tests := []struct {
		name    string
		mutate  func(*Options)
		wantErr string // "" = valid
	}{
		{"defaults", func(*Options) {}, ""},
		{"one node", func(o *Options) { o.Nodes = 1 }, ""},
		{"sixteen nodes", func(o *Options) { o.Nodes = 16 }, ""},
		{"zero nodes", func(o *Options) { o.Nodes = 0 }, "--nodes 0: must be between 1 and 16"},
		{"seventeen nodes", func(o *Options) { o.Nodes = 17 }, "--nodes 17: must be between 1 and 16"},
		{"unknown cni", func(o *Options) { o.CNI = "calico" }, `--cni "calico": unknown CNI; use one of: myelin, bridge, flannel`},
		{"myelin cni", func(o *Options) { o.CNI = CNIMyelin }, ""},
		{"unknown profile", func(o *Options) { o.Profile = "fast" }, `--profile "fast": unknown profile`},
		{"l3 underlay", func(o *Options) { o.Underlay = UnderlayL3 }, ""},
		{"unknown underlay", func(o *Options) { o.Underlay = "l4" }, `--underlay "l4": unknown underlay`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok
			tt.mutate(&o)
			err := o.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestAddressingValidate(t *testing.T) {
	p := netip.MustParsePrefix
	tests := []struct {
		name    string
		mutate  func(*Addressing)
		wantErr string
	}{
		{"defaults", func(*Addressing) {}, ""},
		{"ipv6 segment", func(a *Addressing) { a.SegmentA = p("fd00::/64") }, "must be an IPv4 CIDR"},
		{"host bits", func(a *Addressing) { a.SegmentA = p("198.18.0.5/24") }, "host bits set; use 198.18.0.0/24"},
		{"too small", func(a *Addressing) { a.External = p("203.0.113.0/28") }, "too small"},
		{"machine uplink", func(a *Addressing) { a.SegmentB = p("192.0.2.0/24") }, "overlaps the machine's uplink"},
		{"overlap", func(a *Addressing) { a.ServiceCIDR = p("10.244.128.0/17") }, "overlaps cluster CIDR"},
		{"cluster too small for node CIDRs", func(a *Addressing) { a.ClusterCIDR = p("10.244.0.0/22") }, "too small"},
		{"node mask", func(a *Addressing) { a.NodeCIDRMask = 30; a.ClusterCIDR = p("10.244.0.0/16") }, "node CIDR mask /30"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := DefaultAddressing()
			tt.mutate(&a)
			err := a.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestNewPlanLaysOutNodes(t *testing.T) {
	a := DefaultAddressing()
	if got := a.ControlPlaneIP().String(); got != "198.18.0.1" {
		t.Errorf("control-plane IP = %s, want 198.18.0.1", got)
	}
	if got := a.ExternalServerIP().String(); got != "203.0.113.10" {
		t.Errorf("external server = %s, want 203.0.113.10", got)
	}
	tests := []struct {
		underlay Underlay
		want     []string // node IP and gateway per node
	}{
		{UnderlayL2, []string{"198.18.0.11 via 198.18.0.254", "198.18.0.12 via 198.18.0.254", "198.18.0.13 via 198.18.0.254"}},
		{UnderlayL3, []string{"198.18.0.11 via 198.18.0.254", "198.18.1.12 via 198.18.1.254", "198.18.0.13 via 198.18.0.254"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.underlay), func(t *testing.T) {
			o := DefaultOptions()
			o.Nodes, o.Underlay = 3, tt.underlay
			plan, err := NewPlan(o, a)
			if err != nil {
				t.Fatal(err)
			}
			for i, n := range plan.Nodes {
				if got := n.IP.String() + " via " + n.Gateway.String(); got != tt.want[i] {
					t.Errorf("node %d: %s, want %s", i+1, got, tt.want[i])
				}
				if n.Name != NodeName(i+1) || !n.Segment.Contains(n.IP) {
					t.Errorf("node %d: name %s segment %v IP %v", i+1, n.Name, n.Segment, n.IP)
				}
			}
		})
	}
}

// TestNetworkStepsKeepRootNetnsClean checks the lab-safety rules on the plan itself: the
// root netns gets only the control-plane link (with IPv6 off before it is up, so no
// router advertisement from the lab reaches the root netns), every namespace and root
// link is named myelin-*, and forwarding is switched on only inside the lab's namespaces.
func TestNetworkStepsKeepRootNetnsClean(t *testing.T) {
	for _, underlay := range []Underlay{UnderlayL2, UnderlayL3} {
		o := DefaultOptions()
		o.Nodes, o.Underlay = 4, underlay
		plan, err := NewPlan(o, DefaultAddressing())
		if err != nil {
			t.Fatal(err)
		}
		namespaces := 0
		for _, s := range plan.NetworkSteps() {
			cmd := strings.Join(s, " ")
			switch {
			case s[0] == "ip" && s[1] == "netns" && s[2] == "add":
				namespaces++
				if !strings.HasPrefix(s[3], NamePrefix) {
					t.Errorf("%s: netns without the %s prefix", cmd, NamePrefix)
				}
			case s[0] == "ip" && s[1] == "-n":
				// inside a lab netns: anything goes
				if !strings.HasPrefix(s[2], NamePrefix) {
					t.Errorf("%s: runs in a netns without the prefix", cmd)
				}
			case s[0] == "nsenter":
				if !strings.HasPrefix(s[1], "--net=/run/netns/"+NamePrefix) {
					t.Errorf("%s: not confined to a lab netns", cmd)
				}
			case slices.Equal(s, ControlPlaneLinkNoIPv6), slices.Equal(s, ControlPlaneLinkNoForwarding):
				// root netns: the control-plane link's own settings, gone with the link
			case s[0] == "ip":
				// root netns: only the control-plane link, its address and its state
				if !strings.Contains(cmd, " "+ControlPlaneLink+" ") && !strings.HasSuffix(cmd, " "+ControlPlaneLink) {
					t.Errorf("%s: touches the root netns beyond %s", cmd, ControlPlaneLink)
				}
				if regexp.MustCompile(`\broute\b|sysctl|nft|iptables`).MatchString(cmd) {
					t.Errorf("%s: changes routing or filtering in the root netns", cmd)
				}
			default:
				t.Errorf("%s: unexpected command", cmd)
			}
		}
		steps := plan.NetworkSteps()
		noV6 := slices.IndexFunc(steps, func(s Step) bool { return slices.Equal(s, ControlPlaneLinkNoIPv6) })
		up := slices.IndexFunc(steps, func(s Step) bool { return slices.Equal(s, Step{"ip", "link", "set", ControlPlaneLink, "up"}) })
		if noV6 < 0 || up < 0 || noV6 > up {
			t.Errorf("%s: IPv6 off on %s at step %d, the link up at step %d: want it off before the link is up", underlay, ControlPlaneLink, noV6, up)
		}
		noFwd := slices.IndexFunc(steps, func(s Step) bool { return slices.Equal(s, ControlPlaneLinkNoForwarding) })
		if noFwd < 0 || noFwd > up {
			t.Errorf("%s: forwarding off on %s at step %d, the link up at step %d: want it off before the link is up", underlay, ControlPlaneLink, noFwd, up)
		}
		if want := 3 + o.Nodes; namespaces != want { // router, external host, control plane, nodes
			t.Errorf("%s: %d namespaces, want %d", underlay, namespaces, want)
		}
	}
}

func TestPodNetNSName(t *testing.T) {
	uid := "0b8c5f5e-61f2-4a57-9e3a-6b1f0c1d2e3f"
	if got, want := PodNetNS(uid), "myelin-pod-0b8c5f5e61f24a57"; got != want {
		t.Errorf("PodNetNS = %s, want %s", got, want)
	}
	if id := SandboxID(uid); len(id) != 64 || id != SandboxID(uid) || id == SandboxID(uid+"x") {
		t.Errorf("SandboxID %q: want 64 stable hex chars, distinct per UID", id)
	}
}

func TestNetNSPathMatchesNetns(t *testing.T) {
	if got, want := NetNSPath("myelin-node-1"), netns.Path("myelin-node-1"); got != want {
		t.Errorf("NetNSPath = %s, want %s (internal/netns)", got, want)
	}
}

// lab syn-flood may flood the nodes and pods, never the machine's own lab address,
// the control plane or the router.
func TestFloodTargets(t *testing.T) {
	o := DefaultOptions()
	o.Nodes, o.Underlay = 2, UnderlayL3
	plan, err := NewPlan(o, DefaultAddressing())
	if err != nil {
		t.Fatal(err)
	}
	allowed := func(a netip.Addr) bool {
		for _, p := range plan.FloodTargets() {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	a := plan.Addressing
	for _, addr := range []netip.Addr{plan.Nodes[0].IP, plan.Nodes[1].IP, netip.MustParseAddr("10.244.1.7")} {
		if !allowed(addr) {
			t.Errorf("%v (a node or pod): refused", addr)
		}
	}
	for _, addr := range []netip.Addr{a.HostIP(), a.ControlPlaneIP(), a.RouterIP(a.SegmentA), a.RouterIP(a.SegmentB),
		a.ExternalServerIP(), netip.MustParseAddr("198.18.0.13"), a.APIServerServiceIP()} {
		if allowed(addr) {
			t.Errorf("%v: allowed, want only the nodes' and pods' addresses", addr)
		}
	}
}
