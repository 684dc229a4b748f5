package labplan

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
)

// DefaultDir is where a lab keeps its state, certificates, logs and etcd data.
const DefaultDir = "/run/myelin-lab"

// Paths lays out a lab directory.
type Paths struct {
	Dir string
	// LockFile replaces MachineLock in unit tests (Paths.Lock); empty everywhere else.
	LockFile string
}

func (p Paths) join(elem ...string) string { return filepath.Join(append([]string{p.Dir}, elem...)...) }

// PlanFile records the plan the lab was built from.
func (p Paths) PlanFile() string { return p.join("lab.json") }

// StateFile is written by the supervisor: phase, error and component processes.
func (p Paths) StateFile() string { return p.join("state.json") }

// SupervisorPID holds the supervisor's process id.
func (p Paths) SupervisorPID() string { return p.join("supervisor.pid") }

// PKI is the directory of the lab's CA, certificates and keys.
func (p Paths) PKI() string { return p.join("pki") }

// EtcdServerCert and EtcdServerKey are etcd's serving certificate and key in PKI(),
// issued by the etcd CA (EtcdClientTLS's CA) for the control-plane address.
func (p Paths) EtcdServerCert() string { return p.join("pki", "etcd-server.crt") }
func (p Paths) EtcdServerKey() string  { return p.join("pki", "etcd-server.key") }

// EtcdClientTLS is what a client of the lab's etcd uses: the etcd CA, which etcd also
// trusts for client certificates, and the one client certificate that CA issued
// (kube-apiserver, the supervisor's health probe, flanneld and etcdctl present it).
// The etcd CA is not the lab CA, so no other lab certificate (a node's, the agent's)
// opens etcd, and its key is never written, so no more can be issued.
func (p Paths) EtcdClientTLS() TLSClient {
	return TLSClient{CA: p.join("pki", "etcd-ca.crt"), Cert: p.join("pki", "etcd-client.crt"), Key: p.join("pki", "etcd-client.key")}
}

// Logs is the directory of the processes' logs.
func (p Paths) Logs() string { return p.join("logs") }

// Kubeconfig is the administrator's kubeconfig (the one users point kubectl at).
func (p Paths) Kubeconfig() string { return p.join("kubeconfig") }

// ComponentKubeconfig is the kubeconfig of one component or node.
func (p Paths) ComponentKubeconfig(name string) string { return p.join("kubeconfigs", name) }

// Log is the log file of one process.
func (p Paths) Log(name string) string { return p.join("logs", name+".log") }

// Etcd is etcd's data directory.
func (p Paths) Etcd() string { return p.join("etcd") }

// Hold is the file that keeps a supervised process from being restarted while it exists.
func (p Paths) Hold(name string) string { return p.join("hold", name) }

// CNIBinDir is where a lab node's CNI plugins are installed (the myelin agent installs
// myelin-cni there): <dir>/cni/bin/<node>, so that a DaemonSet (the Helm chart's lab
// mode) mounts <dir>/cni/bin and appends its node's name. The lab kubelet searches it
// first; containerd's bin_dir is it.
func (p Paths) CNIBinDir(node string) string { return p.join("cni", "bin", node) }

// CNIConfDir is where a lab node's CNI network configuration is installed:
// <dir>/cni/net.d/<node> (see CNIBinDir).
func (p Paths) CNIConfDir(node string) string { return p.join("cni", "net.d", node) }

// NodeDir is a lab node's own directory (CNI config, IPAM, pods).
func (p Paths) NodeDir(node string) string { return p.join("nodes", node) }

// IPAMDir is where host-local keeps a node's leases (--cni bridge and flannel).
func (p Paths) IPAMDir(node string) string { return p.join("nodes", node, "cni", "ipam") }

// FlannelSubnetFile is where a node's flanneld writes its subnet.env: per node, under the
// node's directory, instead of the shared default /run/flannel/subnet.env.
func (p Paths) FlannelSubnetFile(node string) string {
	return p.join("nodes", node, "flannel", "subnet.env")
}

// KubeProxyConfig is the KubeProxyConfiguration file of a node's kube-proxy.
func (p Paths) KubeProxyConfig(node string) string { return p.join("nodes", node, "kube-proxy.yaml") }

// PodNetNS is the name of a pod's network namespace, derived from the pod's UID so that
// the lab kubelet, `lab exec` and `lab down` agree on it without any shared state.
func PodNetNS(uid string) string {
	return PodNSPrefix + strings.ReplaceAll(uid, "-", "")[:16]
}

// SandboxID is the container id the lab kubelet passes to CNI for a pod (what
// containerd calls the sandbox id): 64 hex characters derived from the pod's UID.
func SandboxID(uid string) string {
	sum := sha256.Sum256([]byte(uid))
	return hex.EncodeToString(sum[:])
}

// BPFFSMounted records that lab up mounted the machine's bpffs (lab down unmounts it).
func (p Paths) BPFFSMounted() string { return p.join("bpffs-mounted") }
