package kubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	cnitypes "github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	corev1 "k8s.io/api/core/v1"
)

// podIfName is the pod's interface, as containerd names it.
const podIfName = "eth0"

// sandbox is a Pod's network: its netns and what CNI ADD returned. It is kept on disk so
// a restarted kubelet adopts it and a deleted Pod's sandbox can be torn down later.
type sandbox struct {
	UID         string `json:"uid"`
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	NetNS       string `json:"netns"`
	ContainerID string `json:"containerID"`
	IP          string `json:"ip"`
	ConfList    []byte `json:"confList"` // the network configuration ADD ran with, for DEL
}

func (s *sandbox) netnsPath() string { return labplan.NetNSPath(s.NetNS) }

// cniRuntime creates and removes sandboxes through libcni, as containerd does.
type cniRuntime struct {
	cfg Config
	cni *libcni.CNIConfig
}

func newCNIRuntime(cfg Config) *cniRuntime {
	return &cniRuntime{cfg: cfg, cni: libcni.NewCNIConfigWithCacheDir(cfg.cniBinDirs(), cfg.cniCacheDir(), nil)}
}

// errNetworkNotReady is returned while no CNI configuration is installed on the node.
var errNetworkNotReady = errors.New("network plugin not ready")

// config loads the node's network configuration: the first .conflist in the CNI
// configuration directory, in name order.
func (r *cniRuntime) config() (*libcni.NetworkConfigList, error) {
	dir := r.cfg.cniConfDir()
	files, err := libcni.ConfFiles(dir, []string{".conflist"})
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("%w: no CNI configuration in %s", errNetworkNotReady, dir)
	}
	list, err := libcni.ConfListFromFile(files[0])
	if err != nil {
		return nil, fmt.Errorf("%w: load %s: %v", errNetworkNotReady, files[0], err)
	}
	return list, nil
}

// runtimeConf is what containerd passes to CNI for a pod sandbox.
func (s *sandbox) runtimeConf() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: s.ContainerID,
		NetNS:       s.netnsPath(),
		IfName:      podIfName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", s.Namespace},
			{"K8S_POD_NAME", s.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", s.ContainerID},
			{"K8S_POD_UID", s.UID},
		},
	}
}

// setup creates the pod's netns and runs CNI ADD. On failure it removes what it made
// (CNI DEL, netns) and returns the plugin's error.
func (r *cniRuntime) setup(ctx context.Context, pod *corev1.Pod) (*sandbox, error) {
	list, err := r.config()
	if err != nil {
		return nil, err
	}
	uid := string(pod.UID)
	sb := &sandbox{
		UID: uid, Namespace: pod.Namespace, Name: pod.Name,
		NetNS: labplan.PodNetNS(uid), ContainerID: labplan.SandboxID(uid), ConfList: list.Bytes,
	}
	if err := ipNetNS("add", sb.NetNS); err != nil {
		return nil, err
	}
	if err := ipNetNSExec(sb.NetNS, "ip", "link", "set", "lo", "up"); err != nil {
		_ = ipNetNS("del", sb.NetNS)
		return nil, err
	}
	// Record before ADD so that a crash in between still leads to a DEL later.
	if err := writeSandbox(r.cfg.sandboxDir(), sb); err != nil {
		_ = ipNetNS("del", sb.NetNS)
		return nil, err
	}
	res, err := r.cni.AddNetworkList(ctx, list, sb.runtimeConf())
	if err == nil {
		sb.IP, err = firstIPv4(res)
	}
	if err == nil {
		err = writeSandbox(r.cfg.sandboxDir(), sb)
	}
	if err != nil {
		// Undo the failed ADD. If DEL fails too (a plugin that is missing or broken),
		// the sandbox is forgotten anyway: the next attempt must start clean, and the
		// DEL error goes into the message the Pod's event shows.
		if terr := r.teardown(ctx, sb); terr != nil {
			err = fmt.Errorf("%w (cleanup after the failed ADD: %v)", err, terr)
			_ = r.forget(sb)
		}
		return nil, err
	}
	return sb, nil
}

func firstIPv4(res cnitypes.Result) (string, error) {
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		return "", fmt.Errorf("convert CNI result: %w", err)
	}
	for _, ip := range cur.IPs {
		if ip.Address.IP.To4() != nil {
			return ip.Address.IP.String(), nil
		}
	}
	return "", errors.New("CNI ADD returned no IPv4 address")
}

// teardown runs CNI DEL with the configuration ADD used, then deletes the netns.
// Everything already gone counts as done. The sandbox's record is forgotten only when
// DEL succeeded, so that a later kubelet retries a DEL that failed.
func (r *cniRuntime) teardown(ctx context.Context, sb *sandbox) error {
	delErr := r.del(ctx, sb)
	var nsErr error
	if _, err := os.Stat(sb.netnsPath()); err == nil {
		nsErr = ipNetNS("del", sb.NetNS)
	}
	if delErr == nil {
		delErr = r.forget(sb)
	}
	return errors.Join(delErr, nsErr)
}

func (r *cniRuntime) del(ctx context.Context, sb *sandbox) error {
	list, err := libcni.ConfListFromBytes(sb.ConfList)
	if err != nil {
		return fmt.Errorf("load the CNI configuration of %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	rt := sb.runtimeConf()
	if _, err := os.Stat(sb.netnsPath()); err != nil {
		rt.NetNS = "" // CNI DEL with the netns gone: plugins release what they can
	}
	if err := r.cni.DelNetworkList(ctx, list, rt); err != nil {
		return fmt.Errorf("CNI DEL for %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	return nil
}

// forget removes the sandbox's record.
func (r *cniRuntime) forget(sb *sandbox) error {
	err := os.Remove(filepath.Join(r.cfg.sandboxDir(), sb.UID+".json"))
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

func ipNetNS(verb, name string) error {
	return runCmd("ip", "netns", verb, name)
}

func ipNetNSExec(ns string, argv ...string) error {
	return runCmd(append([]string{"nsenter", "--net=" + labplan.NetNSPath(ns), "--"}, argv...)...)
}

func runCmd(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %s", strings.Join(argv, " "), strings.TrimSpace(string(out)+" "+err.Error()))
	}
	return nil
}
