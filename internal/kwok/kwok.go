// Package kwok runs the pinned kwok (Kubernetes WithOut Kubelet, sigs.k8s.io/kwok) that
// scripts/build-kwok.sh builds into the tool cache against a lab's apiserver: it keeps
// simulated Nodes Ready and their pods Running with an IP from the Node's PodCIDR, so
// that one real agent can be measured in a cluster of a thousand nodes (`myelin bench
// scale`, docs/scale.md). It also builds those Nodes and pods.
package kwok

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/myelin-net/myelin/internal/lab/cni"
)

// Version is the kwok scripts/build-kwok.sh pins (KWOK_VERSION; a test checks they agree).
const Version = "v0.7.0"

// Annotation (key=value) marks the Nodes kwok manages; Taint keeps everything that is
// scheduled (DaemonSets included) off them.
const (
	AnnotationKey   = "kwok.x-k8s.io/node"
	AnnotationValue = "fake"
	LabelKey        = "type"
	LabelValue      = "kwok"
)

// BinDir is where scripts/build-kwok.sh puts kwok.
func BinDir() string { return filepath.Join(cni.ToolCache(), "kwok", Version, "bin") }

// Bin is the pinned kwok; "" when it is not built (run make setup). A kwok on PATH is
// not used: the lab runs it as root, and another version simulates differently.
func Bin() string {
	p := filepath.Join(BinDir(), "kwok")
	if _, err := exec.LookPath(p); err == nil {
		return p
	}
	return ""
}

// config is kwok's configuration: its default of 4 pods patched at once ran 50,000
// pods at ~55 a second on a loaded 2-vCPU machine; the apiserver takes more in parallel.
const config = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 32
  nodePlayStageParallelism: 8
`

// nodeLeaseSeconds is the Lease kwok keeps for each Node, renewed on a timer as a
// kubelet does. Without one a node's only heartbeat is its status, which kwok updates
// again only on the event of its previous update: when its watches kept ending (against
// Debian's etcd 3.4 the apiserver refused kwok's watches from resourceVersion 0, before
// the lab built its own etcd) a node whose update fell into such a gap got no further
// heartbeat: NotReady, its pods marked unready, or evicted
// (docs/bench/2026-11-30/kwok-full).
const nodeLeaseSeconds = 40

// Process is a running kwok.
type Process struct {
	cmd  *exec.Cmd
	done chan error
	log  *os.File
}

// Start runs kwok against the cluster of kubeconfig, managing only the Nodes annotated
// AnnotationKey=AnnotationValue, with its log (warnings and errors) in logPath and its
// configuration (kwok.yaml) beside it. Stop ends it.
func Start(kubeconfig, logPath string) (*Process, error) {
	bin := Bin()
	if bin == "" {
		return nil, fmt.Errorf("kwok %s is not built (%s): run make setup", Version, BinDir())
	}
	conf := filepath.Join(filepath.Dir(logPath), "kwok.yaml")
	if err := os.WriteFile(conf, []byte(config), 0o644); err != nil {
		return nil, fmt.Errorf("write kwok configuration: %w", err)
	}
	log, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create kwok log: %w", err)
	}
	cmd := exec.Command(bin, "--config", conf, "--kubeconfig", kubeconfig, "-v", "WARN",
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector", AnnotationKey+"="+AnnotationValue,
		"--node-lease-duration-seconds", strconv.Itoa(nodeLeaseSeconds))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start kwok: %w", err)
	}
	p := &Process{cmd: cmd, done: make(chan error, 1), log: log}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// Stop ends kwok (SIGTERM, then SIGKILL after 10 s) and closes its log.
func (p *Process) Stop() error {
	defer p.log.Close()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("stop kwok: it ignored SIGTERM for 10 s and was killed")
	}
}

// Exited reports an early exit of kwok: nil while it runs.
func (p *Process) Exited(ctx context.Context) error {
	select {
	case err := <-p.done:
		p.done <- err
		return fmt.Errorf("kwok exited: %v (see %s)", err, p.log.Name())
	default:
		return ctx.Err()
	}
}
