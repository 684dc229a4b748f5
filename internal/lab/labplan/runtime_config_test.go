package labplan

import (
	"net/netip"
	"strings"
	"testing"
)

func TestContainerdConfigIsPerNode(t *testing.T) {
	paths := Paths{Dir: "/run/myelin-lab"}
	conf := ContainerdConfig(paths, "myelin-node-2", "myelin/pause:v1")
	for _, want := range []string{
		`root = "/run/myelin-lab/nodes/myelin-node-2/containerd/root"`,
		`state = "/run/myelin-lab/nodes/myelin-node-2/containerd/state"`,
		`address = "/run/myelin-lab/nodes/myelin-node-2/containerd/containerd.sock"`,
		`address = "/run/myelin-lab/nodes/myelin-node-2/containerd/containerd.sock.ttrpc"`,
		`sandbox_image = "myelin/pause:v1"`,
		"restrict_oom_score_adj = true",
		"netns_mounts_under_state_dir = true",
		"disable_apparmor = true",
		"SystemdCgroup = false",
		`Root = "/run/myelin-lab/nodes/myelin-node-2/containerd/runc"`,
		`bin_dir = "/run/myelin-lab/cni/bin/myelin-node-2"`,
		`conf_dir = "/run/myelin-lab/cni/net.d/myelin-node-2"`,
		"max_conf_num = 1",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("containerd config lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "myelin-node-1") {
		t.Errorf("node 2's containerd config names node 1:\n%s", conf)
	}
}

func TestKubeletConfigIsPerNode(t *testing.T) {
	paths := Paths{Dir: "/run/myelin-lab"}
	n := Node{Name: "myelin-node-1", IP: netip.MustParseAddr("198.18.0.11")}
	conf := KubeletConfig(paths, n, DefaultAddressing().DNSServiceIP())
	for _, want := range []string{
		"address: 198.18.0.11", "healthzBindAddress: 198.18.0.11",
		"containerRuntimeEndpoint: unix:///run/myelin-lab/nodes/myelin-node-1/containerd/containerd.sock",
		"cgroupDriver: cgroupfs", "cgroupRoot: /myelin-node-1", "failCgroupV1: false", "failSwapOn: false",
		"podLogsDir: /run/myelin-lab/nodes/myelin-node-1/pod-logs",
		"imageGCHighThresholdPercent: 100", "makeIPTablesUtilChains: false",
		"clientCAFile: /run/myelin-lab/pki/ca.crt", "mode: Webhook", "nodefs.available: 1%\n", "clusterDNS:\n- 10.96.0.10\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("kubelet config lacks %q:\n%s", want, conf)
		}
	}
	args := strings.Join(KubeletArgs(paths, n), " ")
	for _, want := range []string{"--hostname-override myelin-node-1", "--node-ip 198.18.0.11",
		"--root-dir /run/myelin-lab/nodes/myelin-node-1/kubelet", "--cert-dir /run/myelin-lab/nodes/myelin-node-1/kubelet/pki", "--kubeconfig /run/myelin-lab/kubeconfigs/myelin-node-1"} {
		if !strings.Contains(args, want) {
			t.Errorf("kubelet args %q lack %q", args, want)
		}
	}
}

func TestRuntimeOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Options)
		err  string
	}{
		{"containerd", func(o *Options) { o.Runtime = RuntimeContainerd }, ""},
		{"containerd without CNI", func(o *Options) { o.Runtime, o.CNI = RuntimeContainerd, CNINone }, ""},
		{"unknown runtime", func(o *Options) { o.Runtime = "docker" }, `--runtime "docker": unknown runtime`},
		{"no CNI on the lab kubelet", func(o *Options) { o.CNI = CNINone }, "--cni none: only valid with --runtime containerd"},
		{"containerd on l3", func(o *Options) { o.Runtime, o.Underlay = RuntimeContainerd, UnderlayL3 }, "use --underlay l2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			tc.mod(&o)
			_, err := NewPlan(o, DefaultAddressing())
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("NewPlan: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("NewPlan: %v, want an error containing %q", err, tc.err)
			}
		})
	}
	p, err := NewPlan(DefaultOptions(), DefaultAddressing())
	if err != nil || p.Options.Runtime != RuntimeLab || !strings.HasSuffix(p.Options.Flags(), " --runtime lab") {
		t.Fatalf("default plan: runtime %q, flags %q, err %v; want the lab runtime named in the flags", p.Options.Runtime, p.Options.Flags(), err)
	}
}
