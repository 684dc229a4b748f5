package lab

import (
	"encoding/json"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

func flannelPlan(t *testing.T, backend string) labplan.Plan {
	t.Helper()
	o := labplan.DefaultOptions()
	o.CNI, o.FlannelBackend = labplan.CNIFlannel, backend
	p, err := labplan.NewPlan(o, labplan.DefaultAddressing())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFlannelNetConfig(t *testing.T) {
	if got := flannelPlan(t, "").Options.FlannelBackend; got != labplan.FlannelVXLAN {
		t.Errorf("default backend = %q, want vxlan", got)
	}
	for backend, want := range map[string]string{
		labplan.FlannelVXLAN:  `{"Network":"10.244.0.0/16","SubnetLen":24,"Backend":{"Type":"vxlan"}}`,
		labplan.FlannelHostGW: `{"Network":"10.244.0.0/16","SubnetLen":24,"Backend":{"Type":"host-gw"}}`,
	} {
		p := flannelPlan(t, backend)
		if got := string(FlannelNetConfig(p)); got != want {
			t.Errorf("%s: FlannelNetConfig() = %s, want %s", backend, got, want)
		}
		cmd := flannelConfigCommand(p)
		wantCmd := []string{"etcdctl", "--endpoints", "http://198.18.0.1:2379", "--command-timeout=10s", "put", "/coreos.com/network/config", want}
		if !slices.Equal(cmd, wantCmd) {
			t.Errorf("%s: config command = %q, want %q", backend, cmd, wantCmd)
		}
	}
}

func TestFlannelProcesses(t *testing.T) {
	paths := labplan.Paths{Dir: "/run/myelin-lab"}
	p := flannelPlan(t, labplan.FlannelHostGW)
	var flanneld []labplan.Process
	for _, proc := range Processes(p, paths, "/bin/myelin", "/kube") {
		if strings.HasPrefix(proc.Name, "agent-") {
			t.Errorf("--cni flannel runs %s", proc.Name)
		}
		if strings.HasPrefix(proc.Name, "flanneld-") {
			flanneld = append(flanneld, proc)
		}
	}
	if len(flanneld) != 2 {
		t.Fatalf("flanneld processes = %d, want one per node (2)", len(flanneld))
	}
	argv := strings.Join(flanneld[1].Argv, " ")
	for _, want := range []string{
		"nsenter --net=/run/netns/myelin-node-2 -- " + FlannelBinary(),
		"--etcd-endpoints http://198.18.0.1:2379", "--etcd-prefix /coreos.com/network", "--iface eth0",
		"--subnet-file /run/myelin-lab/nodes/myelin-node-2/flannel/subnet.env", "--ip-masq",
	} {
		if !strings.Contains(argv, want) {
			t.Errorf("flanneld argv %q lacks %q", argv, want)
		}
	}
	if strings.Contains(argv, "kube-subnet-mgr") || strings.Contains(argv, "/run/flannel") {
		t.Errorf("flanneld argv %q uses the Kubernetes subnet manager or the shared /run/flannel", argv)
	}
}

const subnetEnv = `FLANNEL_NETWORK=10.244.0.0/16
FLANNEL_SUBNET=10.244.57.1/24
FLANNEL_MTU=1450
FLANNEL_IPMASQ=true
`

func TestParseFlannelSubnet(t *testing.T) {
	got, err := ParseFlannelSubnet([]byte(subnetEnv))
	if err != nil {
		t.Fatal(err)
	}
	want := FlannelSubnet{
		Network: netip.MustParsePrefix("10.244.0.0/16"), Subnet: netip.MustParsePrefix("10.244.57.1/24"),
		MTU: 1450, IPMasq: true,
	}
	if got != want {
		t.Errorf("ParseFlannelSubnet() = %+v, want %+v", got, want)
	}
	for name, tt := range map[string]struct{ in, wantErr string }{
		"empty":       {"", "no FLANNEL_NETWORK"},
		"no subnet":   {"FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_MTU=1450\n", "no FLANNEL_SUBNET"},
		"bad mtu":     {"FLANNEL_MTU=big\n", `FLANNEL_MTU="big"`},
		"bad subnet":  {"FLANNEL_SUBNET=10.244.57.1\n", `FLANNEL_SUBNET="10.244.57.1"`},
		"bad ip-masq": {"FLANNEL_IPMASQ=maybe\n", `FLANNEL_IPMASQ="maybe"`},
	} {
		if _, err := ParseFlannelSubnet([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: ParseFlannelSubnet() = %v, want error containing %q", name, err, tt.wantErr)
		}
	}
}

func TestFlannelConfList(t *testing.T) {
	s, err := ParseFlannelSubnet([]byte(subnetEnv))
	if err != nil {
		t.Fatal(err)
	}
	b, err := FlannelConfList(s, "/run/myelin-lab/nodes/myelin-node-1/cni/ipam")
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		CNIVersion string `json:"cniVersion"`
		Name       string `json:"name"`
		Plugins    []struct {
			Type             string `json:"type"`
			Bridge           string `json:"bridge"`
			IsGateway        bool   `json:"isGateway"`
			IsDefaultGateway bool   `json:"isDefaultGateway"`
			HairpinMode      bool   `json:"hairpinMode"`
			IPMasq           bool   `json:"ipMasq"`
			MTU              int    `json:"mtu"`
			IPAM             struct {
				Type    string                `json:"type"`
				Ranges  [][]map[string]string `json:"ranges"`
				Routes  []map[string]string   `json:"routes"`
				DataDir string                `json:"dataDir"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	if conf.Name != "cbr0" || len(conf.Plugins) != 2 || conf.Plugins[0].Type != "bridge" || conf.Plugins[1].Type != "portmap" {
		t.Fatalf("conflist = %s, want network cbr0 with bridge then portmap", b)
	}
	br := conf.Plugins[0]
	if br.Bridge != "cni0" || !br.IsGateway || !br.IsDefaultGateway || !br.HairpinMode || br.IPMasq || br.MTU != 1450 {
		t.Errorf("bridge plugin = %+v, want cni0, gateway, default gateway, hairpin, no ipMasq (flanneld masquerades), MTU 1450", br)
	}
	ipam := br.IPAM
	if ipam.Type != "host-local" || ipam.Ranges[0][0]["subnet"] != "10.244.57.0/24" ||
		ipam.Routes[0]["dst"] != "10.244.0.0/16" || ipam.DataDir != "/run/myelin-lab/nodes/myelin-node-1/cni/ipam" {
		t.Errorf("ipam = %+v, want host-local on 10.244.57.0/24, a route to 10.244.0.0/16 and the node's own dataDir", ipam)
	}

	s.IPMasq = false
	b, _ = FlannelConfList(s, "/x")
	if !strings.Contains(string(b), `"ipMasq": true`) {
		t.Errorf("without flanneld's --ip-masq the bridge must masquerade: %s", b)
	}
}

// TestFlannelVersionMatchesSetup keeps the lab's FlannelVersion, the one setup builds and
// the path scripts/build-flannel.sh installs it to in step.
func TestFlannelVersionMatchesSetup(t *testing.T) {
	b, err := os.ReadFile("../../scripts/versions.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "FLANNEL_VERSION="+FlannelVersion+"\n") {
		t.Fatalf("scripts/versions.sh does not pin FLANNEL_VERSION=%s; keep the two in step", FlannelVersion)
	}
	t.Setenv("MYELIN_CACHE", "/opt/c")
	if got, want := FlannelBinary(), "/opt/c/flannel/"+FlannelVersion+"/bin/flannel"; got != want {
		t.Errorf("FlannelBinary() = %s, want %s (where scripts/build-flannel.sh puts it)", got, want)
	}
}
