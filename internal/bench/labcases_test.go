package bench

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// TestLabCases checks the lab stages' case names, stages and baselines without a lab.
func TestLabCases(t *testing.T) {
	all := Catalog("bhtest-")
	if err := Validate(all); err != nil {
		t.Fatal(err)
	}
	byName := map[string]Case{}
	for _, c := range all {
		byName[c.Name] = c
	}
	for name, want := range map[string]struct{ stage, baseline string }{
		"native/bpf-cross-node/tcp-rr/same-vcpu":             {"native", "native/node-to-node/tcp-rr/same-vcpu"},
		"native/legacy-same-node/tcp-crr/cross-vcpu":         {"native", "native/veth-pair/tcp-crr/cross-vcpu"},
		"native/bpf-nocheck-same-node/tcp-rr/same-vcpu":      {"native", "native/bpf-same-node/tcp-rr/same-vcpu"},
		"tunnel/legacy-cross-node/udp-loss/same-vcpu":        {"tunnel", "tunnel/node-to-node/udp-loss/same-vcpu"},
		"plain/vxlan-cross-node/tcp-stream/same-vcpu":        {"plain", "plain/node-to-node/tcp-stream/same-vcpu"},
		"plain/bridge-same-node/tcp-rr/same-vcpu":            {"plain", "plain/veth-pair/tcp-rr/same-vcpu"},
		"flannel-vxlan/flannel-cross-node/tcp-rr/same-vcpu":  {"flannel-vxlan", "flannel-vxlan/node-to-node/tcp-rr/same-vcpu"},
		"flannel-host-gw/flannel-same-node/tcp-rr/same-vcpu": {"flannel-host-gw", "flannel-host-gw/veth-pair/tcp-rr/same-vcpu"},
		"native/node-to-node/tcp-rr/same-vcpu":               {"native", ""},
		"svc-iptables-10000/svc-crr/same-vcpu":               {"svc-iptables-10000", "svc-iptables-10000/direct-crr/same-vcpu"},
		"svc-myelin-10/svc-crr/cross-vcpu":                   {"svc-myelin-10", "svc-myelin-10/direct-crr/cross-vcpu"},
		"svc-myelin-10/direct-crr/cross-vcpu":                {"svc-myelin-10", ""},
	} {
		c, ok := byName[name]
		if !ok {
			t.Errorf("no case %s", name)
			continue
		}
		if c.Stage != want.stage || c.Baseline != want.baseline {
			t.Errorf("%s: stage %q baseline %q, want %q %q", name, c.Stage, c.Baseline, want.stage, want.baseline)
		}
	}
	// The environments of a stage share one lab; no two stages do.
	clusters := map[*Cluster]string{}
	for _, c := range all {
		switch c.Env.(type) {
		case *ServiceScale, *ControlPlane:
			// Each builds its own lab in a stage of its own name.
			if c.Stage != c.Env.Name() {
				t.Errorf("%s: stage %q, want its environment's %q", c.Name, c.Stage, c.Env.Name())
			}
			continue
		}
		env, ok := c.Env.(*LabEnv)
		if !ok {
			if c.Stage != "" {
				t.Errorf("%s: stage %q without a lab environment", c.Name, c.Stage)
			}
			continue
		}
		if s, seen := clusters[env.cluster]; seen && s != c.Stage {
			t.Errorf("%s: shares the lab of stage %s", c.Name, s)
		}
		clusters[env.cluster] = c.Stage
		if !strings.HasPrefix(c.Name, c.Stage+"/") {
			t.Errorf("%s: not named after its stage %s", c.Name, c.Stage)
		}
	}
	if c, ok := byName["native/bpf-noflows-same-node/tcp-stream/same-vcpu"]; !ok {
		t.Error("no case native/bpf-noflows-same-node/tcp-stream/same-vcpu")
	} else if c.Env.(*LabEnv).part != (noFlowsPair{podPair: podPair{client: labplan.NodeName(6), server: labplan.NodeName(6), hostRouting: hostRoutingBPF},
		flowsOnNode: labplan.NodeName(1)}) || c.Baseline != "native/bpf-same-node/tcp-stream/same-vcpu" {
		t.Errorf("native flows off: pods %+v, compared to %s; want both pods on node 6, compared to native/bpf-same-node/tcp-stream/same-vcpu", c.Env.(*LabEnv).part, c.Baseline)
	}
	// Source validation off on a fifth and a seventh native node, and only there.
	if _, ok := byName["tunnel/bpf-nocheck-same-node/tcp-rr/same-vcpu"]; ok {
		t.Error("the tunnel stage measures source validation off; only native should")
	}
	if c, ok := byName["native/bpf-nocheck-same-node/tcp-rr/cross-vcpu"]; !ok {
		t.Error("no case native/bpf-nocheck-same-node/tcp-rr/cross-vcpu")
	} else if spec := c.Env.(*LabEnv).cluster.Spec; spec.Nodes != 7 || !reflect.DeepEqual(spec.Overrides[len(spec.Overrides)-1], NodeOverride{Name: "no-source-check", Nodes: []string{labplan.NodeName(5), labplan.NodeName(7)}, Settings: map[string]string{sourceValidationKey: "false"}}) ||
		c.Env.(*LabEnv).part != (podPair{client: labplan.NodeName(5), server: labplan.NodeName(5), hostRouting: hostRoutingBPF, sourceCheckOff: true}) {
		t.Errorf("native source check off: lab %+v, pods %+v; want nodes 5 and 7 of 7 off, both pods on 5", spec, c.Env.(*LabEnv).part)
	}
	if c, ok := byName["native/bpf-nocheck-cross-node/tcp-rr/same-vcpu"]; !ok {
		t.Error("no case native/bpf-nocheck-cross-node/tcp-rr/same-vcpu")
	} else if c.Env.(*LabEnv).part != (podPair{client: labplan.NodeName(5), server: labplan.NodeName(7), hostRouting: hostRoutingBPF, sourceCheckOff: true}) ||
		c.Baseline != "native/bpf-cross-node/tcp-rr/same-vcpu" {
		t.Errorf("native source check off across nodes: pods %+v, compared to %s; want node 5 to node 7, compared to native/bpf-cross-node/tcp-rr/same-vcpu", c.Env.(*LabEnv).part, c.Baseline)
	}
	// The tunnel in BPF against the device, both compared to node-to-node in one lab:
	// nodes 5-6 with enable-bpf-tunnel false; the BPF pairs must report "BPF".
	if c, ok := byName["tunnel/bpf-devicetunnel-cross-node/tcp-crr/same-vcpu"]; !ok {
		t.Error("no case tunnel/bpf-devicetunnel-cross-node/tcp-crr/same-vcpu")
	} else if spec := c.Env.(*LabEnv).cluster.Spec; spec.Nodes != 6 || !reflect.DeepEqual(spec.Overrides[len(spec.Overrides)-1], NodeOverride{Name: "device-tunnel",
		Nodes: []string{labplan.NodeName(5), labplan.NodeName(6)}, Settings: map[string]string{bpfTunnelKey: "false"}}) ||
		c.Env.(*LabEnv).part != (podPair{client: labplan.NodeName(5), server: labplan.NodeName(6), hostRouting: hostRoutingBPF, tunnel: "myelin_vxlan"}) ||
		c.Baseline != "tunnel/node-to-node/tcp-crr/same-vcpu" {
		t.Errorf("tunnel by the device: lab %+v, pods %+v, compared to %s; want nodes 5-6 of 6 off, a pod on each, compared to node-to-node", spec, c.Env.(*LabEnv).part, c.Baseline)
	}
	if c := byName["tunnel/bpf-cross-node/tcp-rr/same-vcpu"]; c.Env == nil || c.Env.(*LabEnv).part.(podPair).tunnel != "BPF" {
		t.Error("tunnel/bpf-cross-node does not check that its nodes encapsulate in BPF")
	}
	if c := byName["native/bpf-cross-node/tcp-rr/same-vcpu"]; c.Env == nil || c.Env.(*LabEnv).part.(podPair).tunnel != "" {
		t.Error("native/bpf-cross-node checks a tunnel")
	}
	quick, err := Select(all, QuickNoLabCases)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range quick {
		if c.Stage != "" {
			t.Errorf("quick case %s needs a lab (stage %s)", c.Name, c.Stage)
		}
	}
}

func TestLabSpecArgs(t *testing.T) {
	for _, tc := range []struct {
		spec LabSpec
		want string
	}{
		{LabSpec{Nodes: 4, CNI: "myelin", Profile: "tunnel"}, "lab up --new --nodes 4 --cni myelin --profile tunnel"},
		{LabSpec{Nodes: 2, CNI: "bridge"}, "lab up --new --nodes 2 --cni bridge"},
		{LabSpec{Nodes: 2, CNI: string(labplan.CNIFlannel), FlannelBackend: "host-gw"}, "lab up --new --nodes 2 --cni flannel --flannel-backend host-gw"},
	} {
		if got := strings.Join(tc.spec.upArgs(), " "); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.spec, got, tc.want)
		}
	}
}

// TestVXLANSteps checks the hand-built overlay of node 1: its device, bridge and pod,
// and the route, neighbour and FDB entry that reach node 2 over the underlay.
func TestVXLANSteps(t *testing.T) {
	nodes := []vxlanNode{{1, netip.MustParseAddr("198.18.0.11")}, {2, netip.MustParseAddr("198.18.0.12")}}
	steps := vxlanSteps(nodes, func(i int) string { return "bhtest-vx-" + string(rune('0'+i)) })
	var got []string
	for _, s := range steps {
		if s[2] == "myelin-node-1" || s[2] == "bhtest-vx-1" {
			got = append(got, strings.Join(s, " "))
		}
	}
	want := []string{
		"ip -n myelin-node-1 link add bench-vx address 02:6d:62:00:00:01 type vxlan id 4242 dev eth0 local 198.18.0.11 dstport 4789 nolearning",
		"ip -n myelin-node-1 addr add 198.19.101.0/32 dev bench-vx",
		"ip -n myelin-node-1 link set bench-vx up",
		"ip -n myelin-node-1 link add bench-br mtu 1450 type bridge",
		"ip -n myelin-node-1 addr add 198.19.101.1/24 dev bench-br",
		"ip -n myelin-node-1 link set bench-br up",
		"ip -n myelin-node-1 link add bench-vxp mtu 1450 type veth peer name eth0 mtu 1450 netns bhtest-vx-1",
		"ip -n myelin-node-1 link set bench-vxp master bench-br up",
		"ip -n bhtest-vx-1 addr add 198.19.101.2/24 dev eth0",
		"ip -n bhtest-vx-1 link set eth0 up",
		"ip -n bhtest-vx-1 link set lo up",
		"ip -n bhtest-vx-1 route add default via 198.19.101.1",
		"ip -n myelin-node-1 route add 198.19.102.0/24 via 198.19.102.0 dev bench-vx onlink",
		"ip -n myelin-node-1 neigh add 198.19.102.0 lladdr 02:6d:62:00:00:02 dev bench-vx nud permanent",
		"bridge -n myelin-node-1 fdb append 02:6d:62:00:00:02 dev bench-vx dst 198.18.0.12",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("steps of node 1:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
