package lab

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/nodelayout"
)

// KubeVersion is the Kubernetes release the lab runs; scripts/versions.sh builds it.
const KubeVersion = "v1.34.4"

// Ports of the control plane, all bound to the control-plane address only.
const (
	EtcdClientPort        = 2379
	EtcdPeerPort          = 2380
	APIServerPort         = 6443
	ControllerManagerPort = 10257
	SchedulerPort         = 10259
	ExternalHTTPPort      = 80
)

// KubeBinDir is where scripts/build-k8s.sh puts the Kubernetes binaries; it follows
// the same rule as scripts/versions.sh ($MYELIN_CACHE, else $XDG_CACHE_HOME/myelin,
// else ~/.cache/myelin).
func KubeBinDir() string {
	return filepath.Join(cacheDir(), "kubernetes", KubeVersion, "bin")
}

// cacheDir is the tool cache outside the repository (scripts/versions.sh's MYELIN_CACHE).
func cacheDir() string {
	cache := os.Getenv("MYELIN_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil { // no $HOME (e.g. a bare CI environment): the passwd entry's
				if u, uerr := user.Current(); uerr == nil {
					home = u.HomeDir
				}
			}
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "myelin")
	}
	return cache
}

// Processes returns the lab's children in start order: the control plane, the external
// host's HTTP server, and one lab kubelet per node. self is the myelin binary.
func Processes(p labplan.Plan, paths labplan.Paths, self, kubeBin string) []labplan.Process {
	ip := p.Addressing.ControlPlaneIP().String()
	pki := func(f string) string { return filepath.Join(paths.PKI(), f) }
	url := func(scheme string, port int, path string) string {
		return fmt.Sprintf("%s://%s:%d%s", scheme, ip, port, path)
	}
	etcdClient := url("http", EtcdClientPort, "")
	etcdPeer := url("http", EtcdPeerPort, "")
	procs := []labplan.Process{
		{
			Name: "etcd",
			Argv: []string{"etcd", "--name", "myelin-lab", "--data-dir", paths.Etcd(),
				"--listen-client-urls", etcdClient, "--advertise-client-urls", etcdClient,
				"--listen-peer-urls", etcdPeer, "--initial-advertise-peer-urls", etcdPeer,
				"--initial-cluster", "myelin-lab=" + etcdPeer, "--log-level", "warn"},
			Health: etcdClient + "/health",
		},
		{
			Name: "kube-apiserver",
			Argv: []string{filepath.Join(kubeBin, "kube-apiserver"),
				"--etcd-servers", etcdClient,
				"--bind-address", ip, "--advertise-address", ip, "--secure-port", strconv.Itoa(APIServerPort),
				"--tls-cert-file", pki("apiserver.crt"), "--tls-private-key-file", pki("apiserver.key"),
				"--client-ca-file", pki("ca.crt"),
				"--service-account-key-file", pki("sa.pub"), "--service-account-signing-key-file", pki("sa.key"),
				"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
				"--service-cluster-ip-range", p.Addressing.ServiceCIDR.String(),
				"--authorization-mode", "labplan.Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
				"--allow-privileged=true", "--profiling=false"},
			Health: url("https", APIServerPort, "/readyz"),
		},
		{
			Name: "kube-controller-manager",
			Argv: []string{filepath.Join(kubeBin, "kube-controller-manager"),
				"--kubeconfig", paths.ComponentKubeconfig("kube-controller-manager"),
				"--authentication-kubeconfig", paths.ComponentKubeconfig("kube-controller-manager"),
				"--authorization-kubeconfig", paths.ComponentKubeconfig("kube-controller-manager"),
				"--bind-address", ip, "--secure-port", strconv.Itoa(ControllerManagerPort),
				"--leader-elect=false", "--use-service-account-credentials=true",
				"--allocate-node-cidrs=true", "--cluster-cidr", p.Addressing.ClusterCIDR.String(),
				"--node-cidr-mask-size", strconv.Itoa(p.Addressing.NodeCIDRMask),
				"--service-cluster-ip-range", p.Addressing.ServiceCIDR.String(),
				"--service-account-private-key-file", pki("sa.key"), "--root-ca-file", pki("ca.crt"),
				// Room for 10,000-Service tests and benchmarks: the default 20 QPS would
				// take minutes to write their Endpoints and EndpointSlices.
				"--kube-api-qps", "500", "--kube-api-burst", "1000",
				"--concurrent-service-endpoint-syncs", "20",
				// Nothing in the lab reads v1 Endpoints (myelin and kube-proxy use
				// EndpointSlices); not writing them saves a third of a Service's writes.
				"--controllers", "*,-endpoints-controller",
				"--profiling=false"},
			Health: url("https", ControllerManagerPort, "/healthz"),
		},
		{
			Name: "kube-scheduler",
			Argv: []string{filepath.Join(kubeBin, "kube-scheduler"),
				"--kubeconfig", paths.ComponentKubeconfig("kube-scheduler"),
				"--authentication-kubeconfig", paths.ComponentKubeconfig("kube-scheduler"),
				"--authorization-kubeconfig", paths.ComponentKubeconfig("kube-scheduler"),
				"--bind-address", ip, "--secure-port", strconv.Itoa(SchedulerPort),
				"--leader-elect=false", "--profiling=false"},
			Health: url("https", SchedulerPort, "/healthz"),
		},
		{
			Name: "external-http",
			Argv: labplan.InNS(labplan.ExtNS, self, "lab", "serve", "--name", labplan.ExtNS,
				"--listen", fmt.Sprintf("%s:%d", p.Addressing.ExternalServerIP(), ExternalHTTPPort)),
		},
	}
	for _, n := range p.Nodes {
		procs = append(procs, labplan.Process{
			Name: "kubelet-" + n.Name,
			Argv: labplan.InNS(n.Name, self, "lab", "kubelet", "--node", n.Name, "--dir", paths.Dir),
		})
	}
	if p.Options.KubeProxy != "" {
		for _, n := range p.Nodes {
			procs = append(procs, labplan.Process{
				Name: "kube-proxy-" + n.Name,
				Argv: labplan.InNS(n.Name, filepath.Join(kubeBin, "kube-proxy"), "--config", paths.KubeProxyConfig(n.Name)),
			})
		}
	}
	if p.Options.CNI == labplan.CNIFlannel {
		procs = append(procs, flannelProcesses(p, paths)...)
	}
	if p.Options.CNI == labplan.CNIMyelin {
		bin := filepath.Dir(self)
		for _, n := range p.Nodes {
			procs = append(procs, labplan.Process{
				Name: AgentProcess(n.Name),
				Argv: labplan.InNS(n.Name, filepath.Join(bin, "myelin-agent"), "--node", n.Name,
					"--kubeconfig", paths.ComponentKubeconfig(AgentUser),
					"--state-dir", nodelayout.PerNode(nodelayout.StateDir, n.Name),
					"--bpffs-dir", nodelayout.PerNode(nodelayout.BPFFSDir, n.Name),
					"--cni-bin-dir", paths.CNIBinDir(n.Name),
					"--cni-conf-dir", paths.CNIConfDir(n.Name),
					"--cni-plugin", filepath.Join(bin, "myelin-cni")),
			})
		}
	}
	return procs
}

// AgentProcess names the supervised process (and its log) of a node's myelin agent.
func AgentProcess(node string) string { return "agent-" + node }
