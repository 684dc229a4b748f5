package lab

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// KubeVersion is the Kubernetes release the lab runs; scripts/versions.sh builds it.
const KubeVersion = "v1.34.4"

// KubeBinDir is where scripts/build-k8s.sh puts the Kubernetes binaries; it follows
// the same rule as scripts/versions.sh ($MYELIN_CACHE, else $XDG_CACHE_HOME/myelin,
// else ~/.cache/myelin).
func KubeBinDir() string {
	return filepath.Join(cni.ToolCache(), "kubernetes", KubeVersion, "bin")
}

// EtcdVersion is the etcd the lab runs; scripts/build-etcd.sh builds it (Debian's is
// too old for the apiserver's watch-list and consistent reads from its cache).
const EtcdVersion = "v3.6.16"

// EtcdBin is where scripts/build-etcd.sh puts etcd (the same cache as KubeBinDir).
func EtcdBin() string {
	return filepath.Join(cni.ToolCache(), "etcd", EtcdVersion, "bin", "etcd")
}

// Processes returns the lab's children in start order: the control plane, the external
// host's HTTP server, the runtime's node processes (a lab kubelet per node, or
// containerd and kubelet per node), kube-proxy (with --kube-proxy) and the
// CNI flavour's node daemons. self is the myelin binary.
func Processes(p labplan.Plan, paths labplan.Paths, self, kubeBin string) []labplan.Process {
	procs := append(etcdAndAPIServer(p, paths, kubeBin), controllers(p, paths, kubeBin)...)
	procs = append(procs, labplan.Process{
		Name: "external-http",
		Argv: labplan.InNS(labplan.ExtNS, self, "lab", "serve", "--name", labplan.ExtNS,
			"--listen", fmt.Sprintf("%s:%d", p.Addressing.ExternalServerIP(), labplan.ExternalHTTPPort)),
	})
	procs = append(procs, RuntimeOf(p.Options.Runtime).NodeProcesses(p, paths, self, kubeBin)...)
	if p.Options.KubeProxy != "" {
		for _, n := range p.Nodes {
			procs = append(procs, labplan.Process{
				Name: "kube-proxy-" + n.Name,
				Argv: labplan.InNS(n.Name, filepath.Join(kubeBin, "kube-proxy"), "--config", paths.KubeProxyConfig(n.Name)),
			})
		}
	}
	return append(procs, FlavourOf(p.Options.CNI).Processes(p, paths, self)...)
}

// controlPlaneURL is a URL of a control-plane component on the control-plane address.
func controlPlaneURL(p labplan.Plan, scheme string, port int, path string) string {
	return fmt.Sprintf("%s://%s:%d%s", scheme, p.Addressing.ControlPlaneIP(), port, path)
}

// etcdAndAPIServer are etcd and kube-apiserver, the first two children, in netns CPNS
// like the controllers (docs/architecture.md, "The lab's network plan").
func etcdAndAPIServer(p labplan.Plan, paths labplan.Paths, kubeBin string) []labplan.Process {
	ip := p.Addressing.ControlPlaneIP().String()
	pki := func(f string) string { return filepath.Join(paths.PKI(), f) }
	etcdTLS := paths.EtcdClientTLS()
	return []labplan.Process{
		{
			Name:      "etcd",
			Argv:      labplan.InNS(labplan.CPNS, etcdArgv(p, paths)...),
			Health:    p.Addressing.EtcdURL() + "/health",
			HealthTLS: &etcdTLS,
		},
		{
			Name: "kube-apiserver",
			Argv: labplan.InNS(labplan.CPNS, filepath.Join(kubeBin, "kube-apiserver"),
				"--etcd-servers", p.Addressing.EtcdURL(),
				"--etcd-cafile", etcdTLS.CA, "--etcd-certfile", etcdTLS.Cert, "--etcd-keyfile", etcdTLS.Key,
				"--bind-address", ip, "--advertise-address", ip, "--secure-port", strconv.Itoa(labplan.APIServerPort),
				"--tls-cert-file", pki("apiserver.crt"), "--tls-private-key-file", pki("apiserver.key"),
				"--client-ca-file", pki("ca.crt"),
				"--service-account-key-file", pki("sa.pub"), "--service-account-signing-key-file", pki("sa.key"),
				"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
				"--service-cluster-ip-range", p.Addressing.ServiceCIDR.String(),
				"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
				"--allow-privileged=true", "--profiling=false",
				// exec, logs and port-forward reach the real kubelets (--runtime
				// containerd) at their InternalIP, as this client (Webhook-authorised).
				"--kubelet-preferred-address-types", "InternalIP",
				"--kubelet-client-certificate", pki(labplan.KubeletClientUser+".crt"),
				"--kubelet-client-key", pki(labplan.KubeletClientUser+".key")),
			Health: controlPlaneURL(p, "https", labplan.APIServerPort, "/readyz"),
		},
	}
}

// etcdArgv runs etcd. The control-plane address is reachable from the root
// netns and from pods, and whoever writes to etcd writes Pods the lab kubelets run as
// root, so its client URL takes TLS only, from clients with a certificate of the etcd
// CA (Paths.EtcdClientTLS). A one-member cluster talks to no peer: its peer URL stays on
// loopback in CPNS.
func etcdArgv(p labplan.Plan, paths labplan.Paths) []string {
	client := p.Addressing.EtcdURL()
	peer := fmt.Sprintf("http://127.0.0.1:%d", labplan.EtcdPeerPort)
	return []string{EtcdBin(), "--name", "myelin-lab", "--data-dir", paths.Etcd(),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--cert-file", paths.EtcdServerCert(), "--key-file", paths.EtcdServerKey(),
		"--client-cert-auth", "--trusted-ca-file", paths.EtcdClientTLS().CA,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "myelin-lab=" + peer, "--log-level", "warn"}
}

// controllers are kube-controller-manager and kube-scheduler.
func controllers(p labplan.Plan, paths labplan.Paths, kubeBin string) []labplan.Process {
	ip := p.Addressing.ControlPlaneIP().String()
	pki := func(f string) string { return filepath.Join(paths.PKI(), f) }
	cm, sched := paths.ComponentKubeconfig("kube-controller-manager"), paths.ComponentKubeconfig("kube-scheduler")
	return []labplan.Process{
		{
			Name: "kube-controller-manager",
			Argv: labplan.InNS(labplan.CPNS, filepath.Join(kubeBin, "kube-controller-manager"),
				"--kubeconfig", cm, "--authentication-kubeconfig", cm, "--authorization-kubeconfig", cm,
				"--bind-address", ip, "--secure-port", strconv.Itoa(labplan.ControllerManagerPort),
				"--leader-elect=false", "--use-service-account-credentials=true",
				"--allocate-node-cidrs=true", "--cluster-cidr", p.Addressing.ClusterCIDR.String(),
				"--node-cidr-mask-size", strconv.Itoa(p.Addressing.NodeCIDRMask),
				"--service-cluster-ip-range", p.Addressing.ServiceCIDR.String(),
				"--service-account-private-key-file", pki("sa.key"), "--root-ca-file", pki("ca.crt"),
				// Room for 10,000-Service tests and benchmarks: the default 20 QPS would
				// take minutes to write their Endpoints and EndpointSlices.
				"--kube-api-qps", "500", "--kube-api-burst", "1000",
				"--concurrent-service-endpoint-syncs", "20",
				// Every default controller, v1 Endpoints included, as a real cluster runs:
				// myelin and kube-proxy read EndpointSlices, but the apiserver's
				// services/proxy resolves a Service through its Endpoints, and the
				// conformance suite checks that they are written (docs/conformance.md).
				"--profiling=false"),
			Health: controlPlaneURL(p, "https", labplan.ControllerManagerPort, "/healthz"),
		},
		{
			Name: "kube-scheduler",
			Argv: labplan.InNS(labplan.CPNS, filepath.Join(kubeBin, "kube-scheduler"),
				"--kubeconfig", sched, "--authentication-kubeconfig", sched, "--authorization-kubeconfig", sched,
				"--bind-address", ip, "--secure-port", strconv.Itoa(labplan.SchedulerPort),
				"--leader-elect=false", "--profiling=false"),
			Health: controlPlaneURL(p, "https", labplan.SchedulerPort, "/healthz"),
		},
	}
}
