package flannel

import (
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
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
		if got := string(NetConfig(p)); got != want {
			t.Errorf("%s: NetConfig() = %s, want %s", backend, got, want)
		}
		cmd := configCommand(p, labplan.Paths{Dir: "/run/myelin-lab"})
		wantCmd := []string{"etcdctl", "--endpoints", "https://198.18.0.1:2379",
			"--cacert", "/run/myelin-lab/pki/etcd-ca.crt", "--cert", "/run/myelin-lab/pki/etcd-client.crt",
			"--key", "/run/myelin-lab/pki/etcd-client.key", "--command-timeout=10s",
			"put", "/coreos.com/network/config", want}
		if !slices.Equal(cmd, wantCmd) {
			t.Errorf("%s: config command = %q, want %q", backend, cmd, wantCmd)
		}
	}
}

const subnetEnv = `FLANNEL_NETWORK=10.244.0.0/16
FLANNEL_SUBNET=10.244.57.1/24
FLANNEL_MTU=1450
FLANNEL_IPMASQ=true
`

func TestParseFlannelSubnet(t *testing.T) {
	got, err := ParseSubnet([]byte(subnetEnv))
	if err != nil {
		t.Fatal(err)
	}
	want := Subnet{
		Network: netip.MustParsePrefix("10.244.0.0/16"), Subnet: netip.MustParsePrefix("10.244.57.1/24"),
		MTU: 1450, IPMasq: true,
	}
	if got != want {
		t.Errorf("ParseSubnet() = %+v, want %+v", got, want)
	}
	for name, tt := range map[string]struct{ in, wantErr string }{
		"empty":       {"", "no FLANNEL_NETWORK"},
		"no subnet":   {"FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_MTU=1450\n", "no FLANNEL_SUBNET"},
		"bad mtu":     {"FLANNEL_MTU=big\n", `FLANNEL_MTU="big"`},
		"bad subnet":  {"FLANNEL_SUBNET=10.244.57.1\n", `FLANNEL_SUBNET="10.244.57.1"`},
		"bad ip-masq": {"FLANNEL_IPMASQ=maybe\n", `FLANNEL_IPMASQ="maybe"`},
	} {
		if _, err := ParseSubnet([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: ParseSubnet() = %v, want error containing %q", name, err, tt.wantErr)
		}
	}
}

func TestFlannelConfList(t *testing.T) {
	s, err := ParseSubnet([]byte(subnetEnv))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ConfList(s, "/run/myelin-lab/nodes/myelin-node-1/cni/ipam")
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
	b, _ = ConfList(s, "/x")
	if !strings.Contains(string(b), `"ipMasq": true`) {
		t.Errorf("without flanneld's --ip-masq the bridge must masquerade: %s", b)
	}
}

// TestFlannelVersionMatchesSetup keeps the lab's Version, the one setup builds and
// the path scripts/build-flannel.sh installs it to in step.
func TestFlannelVersionMatchesSetup(t *testing.T) {
	b, err := os.ReadFile("../../../../scripts/versions.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "FLANNEL_VERSION="+Version+"\n") {
		t.Fatalf("scripts/versions.sh does not pin FLANNEL_VERSION=%s; keep the two in step", Version)
	}
	t.Setenv("MYELIN_CACHE", "/opt/c")
	if got, want := Binary(), "/opt/c/flannel/"+Version+"/bin/flannel"; got != want {
		t.Errorf("Binary() = %s, want %s (where scripts/build-flannel.sh puts it)", got, want)
	}
}

// TestFlannelLeases reads each node's leased subnet from its subnet file: the subnet,
// masked, and nothing for a node whose flanneld wrote none (or an unreadable one).
func TestFlannelLeases(t *testing.T) {
	p := flannelPlan(t, "")
	paths := labplan.Paths{Dir: t.TempDir()}
	file := paths.FlannelSubnetFile(p.Nodes[0].Name)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(subnetEnv), 0o644); err != nil {
		t.Fatal(err)
	}
	got := Leases(p, paths)
	want := map[string]netip.Prefix{p.Nodes[0].Name: netip.MustParsePrefix("10.244.57.0/24")}
	if !maps.Equal(got, want) {
		t.Errorf("Leases() = %v, want %v", got, want)
	}
	if err := os.WriteFile(file, []byte("FLANNEL_MTU=1450\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Leases(p, paths); len(got) != 0 {
		t.Errorf("Leases() with a partial subnet file = %v, want none", got)
	}
}
