package lab

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/lab/cni/flannel"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// TestVersionsMatchSetup keeps the lab's KubeVersion and EtcdVersion equal to the ones
// setup builds, and EtcdBin where scripts/versions.sh's ETCD_BIN_DIR puts etcd.
func TestVersionsMatchSetup(t *testing.T) {
	b, err := os.ReadFile("../../scripts/versions.sh")
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"KUBE_VERSION": KubeVersion, "ETCD_VERSION": EtcdVersion} {
		if !strings.Contains(string(b), name+"="+v+"\n") {
			t.Errorf("scripts/versions.sh does not pin %s=%s; keep the two in step", name, v)
		}
	}
	t.Setenv("MYELIN_CACHE", "/opt/c")
	if got, want := EtcdBin(), "/opt/c/etcd/"+EtcdVersion+"/bin/etcd"; got != want {
		t.Errorf("EtcdBin() = %s, want %s (scripts/versions.sh's ETCD_BIN_DIR)", got, want)
	}
}

// TestKubeBinDirFollowsSetup checks KubeBinDir's rule (the one scripts/versions.sh
// uses), including an environment without $HOME.
func TestKubeBinDirFollowsSetup(t *testing.T) {
	want := "/kubernetes/" + KubeVersion + "/bin"
	t.Setenv("MYELIN_CACHE", "/opt/c")
	if got := KubeBinDir(); got != "/opt/c"+want {
		t.Errorf("with MYELIN_CACHE: %s", got)
	}
	t.Setenv("MYELIN_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/x")
	if got := KubeBinDir(); got != "/x/myelin"+want {
		t.Errorf("with XDG_CACHE_HOME: %s", got)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	if got := KubeBinDir(); !strings.HasPrefix(got, "/") || !strings.HasSuffix(got, "/.cache/myelin"+want) {
		t.Errorf("without HOME: %s, want an absolute path under the user's home", got)
	}
}

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
		"nsenter --net=/run/netns/myelin-node-2 -- " + flannel.Binary(),
		"--etcd-endpoints https://198.18.0.1:2379", "--etcd-prefix /coreos.com/network", "--iface eth0",
		"--etcd-cafile /run/myelin-lab/pki/etcd-ca.crt --etcd-certfile /run/myelin-lab/pki/etcd-client.crt --etcd-keyfile /run/myelin-lab/pki/etcd-client.key",
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

// TestEtcdTakesCertifiedClientsOnly: the control-plane address is reachable from the
// root netns and from pods, so etcd serves it over TLS to clients with a certificate of
// the etcd CA only, keeps its peer URL on loopback, and its two clients in the control
// plane (kube-apiserver and the supervisor's probe) present the etcd client certificate.
func TestEtcdTakesCertifiedClientsOnly(t *testing.T) {
	paths := labplan.Paths{Dir: "/run/myelin-lab"}
	p, err := labplan.NewPlan(labplan.DefaultOptions(), labplan.DefaultAddressing())
	if err != nil {
		t.Fatal(err)
	}
	procs := map[string]labplan.Process{}
	for _, proc := range Processes(p, paths, "/bin/myelin", "/kube") {
		procs[proc.Name] = proc
	}
	etcd := procs["etcd"]
	argv := strings.Join(etcd.Argv, " ")
	for _, want := range []string{
		"--listen-client-urls https://198.18.0.1:2379 --advertise-client-urls https://198.18.0.1:2379",
		"--cert-file /run/myelin-lab/pki/etcd-server.crt --key-file /run/myelin-lab/pki/etcd-server.key",
		"--client-cert-auth --trusted-ca-file /run/myelin-lab/pki/etcd-ca.crt",
		"--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380",
	} {
		if !strings.Contains(argv, want) {
			t.Errorf("etcd argv %q lacks %q", argv, want)
		}
	}
	if strings.Contains(argv, "http://198.18.0.1") {
		t.Errorf("etcd argv %q serves plain HTTP on the control-plane address", argv)
	}
	client := paths.EtcdClientTLS()
	if etcd.Health != "https://198.18.0.1:2379/health" || etcd.HealthTLS == nil || *etcd.HealthTLS != client {
		t.Errorf("etcd probe = %s with %+v, want https://198.18.0.1:2379/health with %+v", etcd.Health, etcd.HealthTLS, client)
	}
	api := strings.Join(procs["kube-apiserver"].Argv, " ")
	want := "--etcd-servers https://198.18.0.1:2379 --etcd-cafile " + client.CA + " --etcd-certfile " + client.Cert + " --etcd-keyfile " + client.Key
	if !strings.Contains(api, want) {
		t.Errorf("kube-apiserver argv %q lacks %q", api, want)
	}
}

// TestContainerdNodeNetwork: on --runtime containerd, a CNI the lab configures with
// reference plugins (bridge, flannel) gets one `lab node-network` per node, in the
// node's netns, since no lab kubelet runs it there; myelin and none (their agent
// installs the configuration) get none.
func TestContainerdNodeNetwork(t *testing.T) {
	paths := labplan.Paths{Dir: "/run/myelin-lab"}
	for cniName, want := range map[labplan.CNI]bool{
		labplan.CNIFlannel: true, labplan.CNIBridge: true, labplan.CNIMyelin: false, labplan.CNINone: false,
	} {
		o := labplan.DefaultOptions()
		o.CNI, o.Runtime = cniName, labplan.RuntimeContainerd
		p, err := labplan.NewPlan(o, labplan.DefaultAddressing())
		if err != nil {
			t.Fatal(err)
		}
		var argv []string
		for _, proc := range Processes(p, paths, "/bin/myelin", "/kube") {
			if proc.Name == NodeNetworkProcess("myelin-node-2") {
				argv = proc.Argv
			}
		}
		if got := argv != nil; got != want {
			t.Errorf("--cni %s: node-network process %v, want %v", cniName, got, want)
			continue
		}
		wantArgv := "nsenter --net=/run/netns/myelin-node-2 -- /bin/myelin lab node-network --node myelin-node-2 --dir /run/myelin-lab"
		if want && strings.Join(argv, " ") != wantArgv {
			t.Errorf("--cni %s: node-network argv %q, want %q", cniName, strings.Join(argv, " "), wantArgv)
		}
	}
}

// TestReferencePluginsLinked names what Prepare links into a containerd node's CNI bin
// dir besides loopback: the plugins each flavour's conflist calls.
func TestReferencePluginsLinked(t *testing.T) {
	for cniName, want := range map[labplan.CNI][]string{
		labplan.CNIFlannel: {"bridge", "host-local", "portmap"},
		labplan.CNIBridge:  {"bridge", "host-local"},
		labplan.CNIMyelin:  nil,
		labplan.CNINone:    nil,
	} {
		o := labplan.DefaultOptions()
		o.CNI = cniName
		if got := referencePlugins(labplan.Plan{Options: o}); !slices.Equal(got, want) {
			t.Errorf("--cni %s: referencePlugins() = %q, want %q", cniName, got, want)
		}
	}
}
