package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/myelin-net/myelin/internal/lab"
)

// Bounds of the lab steps; a lab comes up in about a minute on a small VM.
const (
	labUpTimeout   = 10 * time.Minute
	labDownTimeout = 5 * time.Minute
	labPodTimeout  = 2 * time.Minute
)

// LabSpec is the lab a stage runs in: the flags of `myelin lab up`, and the nodes a
// NodeConfig moves to legacy host routing before the measurements.
type LabSpec struct {
	Nodes          int
	CNI            string // --cni: lab.CNIMyelin, lab.CNIBridge or lab.CNIFlannel
	Profile        string // myelin's profile (CNI myelin only)
	FlannelBackend string // "vxlan" or "host-gw" (CNI flannel only)
	KubeProxy      string // --kube-proxy: "iptables" or "nftables"; "" runs none
	LegacyNodes    []string
	// NoSourceCheckNodes get enable-source-ip-verification false (a NodeConfig), to
	// measure what the check costs against nodes that keep it.
	NoSourceCheckNodes []string
}

// upArgs is the command line of `myelin lab up` for the spec.
func (s LabSpec) upArgs() []string {
	args := []string{"lab", "up", "--nodes", strconv.Itoa(s.Nodes), "--cni", s.CNI}
	if s.Profile != "" {
		args = append(args, "--profile", s.Profile)
	}
	if s.FlannelBackend != "" {
		args = append(args, "--flannel-backend", s.FlannelBackend)
	}
	if s.KubeProxy != "" {
		args = append(args, "--kube-proxy", s.KubeProxy)
	}
	return args
}

// A Cluster is the lab of one stage, shared by the stage's environments: the first
// Setup of one of them brings it up (`myelin lab up`, then the NodeConfig and agent
// restarts), and the last Teardown brings it down (`myelin lab down`), also after an
// interrupt. It drives the lab through the myelin binary itself, exactly as a user
// would, so the bench measures the lab users get.
type Cluster struct {
	Spec LabSpec
	// Myelin is the myelin binary; "" means this executable.
	Myelin string
	Paths  lab.Paths

	refs  int   // environments holding the lab
	tried bool  // up was attempted since the lab was last down
	err   error // the outcome of that attempt
	owned bool  // this cluster ran lab up, so lab down is its to run
	kube  *kubeClients
}

// NewCluster returns the (not yet built) lab of spec in the default lab directory.
func NewCluster(spec LabSpec) *Cluster {
	return &Cluster{Spec: spec, Paths: lab.Paths{Dir: lab.DefaultDir}}
}

// Available reports what this machine lacks to build the lab, without changing anything.
func (c *Cluster) Available() error {
	if err := netnsAvailable(); err != nil {
		return err
	}
	self, err := c.binary()
	if err != nil {
		return err
	}
	var need []string
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		need = append(need, filepath.Join(lab.KubeBinDir(), b))
	}
	for _, p := range need {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("Kubernetes binaries not built (%s missing): run make setup", p)
		}
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		return errors.New("needs etcd, which is not installed: run make setup")
	}
	switch c.Spec.CNI {
	case string(lab.CNIMyelin):
		for _, b := range []string{"myelin-agent", "myelin-cni"} {
			if _, err := os.Stat(filepath.Join(filepath.Dir(self), b)); err != nil {
				return fmt.Errorf("needs %s next to %s: run make build", b, self)
			}
		}
	case string(lab.CNIBridge), string(lab.CNIFlannel):
		for _, b := range []string{"bridge", "host-local"} {
			if _, err := os.Stat(filepath.Join(lab.CNIBinDir, b)); err != nil {
				return fmt.Errorf("needs the reference CNI plugin %s in %s: run make setup", b, lab.CNIBinDir)
			}
		}
	}
	if c.Spec.CNI == string(lab.CNIFlannel) {
		if _, err := os.Stat(lab.FlannelBinary()); err != nil {
			return fmt.Errorf("Flannel %s not built (%s missing): run make setup", lab.FlannelVersion, lab.FlannelBinary())
		}
	}
	if c.Spec.KubeProxy == ProxyNFTables {
		if _, err := exec.LookPath("nft"); err != nil {
			return errors.New("kube-proxy in nftables mode needs nft, which is not installed: run make setup")
		}
	}
	if lab.Running(c.Paths) {
		return errors.New("a lab is already running on this machine and bench builds its own: run myelin lab down first")
	}
	return nil
}

// binary is the myelin executable the lab commands run.
func (c *Cluster) binary() (string, error) {
	if c.Myelin != "" {
		return c.Myelin, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the myelin binary: %w", err)
	}
	if filepath.Base(self) != "myelin" {
		return "", fmt.Errorf("lab cases run `myelin lab up`: run them with the myelin command (bin/myelin bench), not %s", filepath.Base(self))
	}
	return self, nil
}

// acquire holds the lab for one environment, bringing it up on first use. A lab that
// failed to come up is not tried again until every holder has released it.
func (c *Cluster) acquire(ctx context.Context) error {
	c.refs++
	if !c.tried {
		c.tried = true
		c.err = c.up(ctx)
	}
	return c.err
}

// release drops one environment's hold; the last one brings the lab down.
func (c *Cluster) release() error {
	if c.refs == 0 {
		return nil
	}
	c.refs--
	if c.refs > 0 {
		return nil
	}
	c.tried, c.err, c.kube = false, nil, nil
	if !c.owned {
		return nil
	}
	c.owned = false
	ctx, cancel := context.WithTimeout(context.Background(), labDownTimeout)
	defer cancel()
	return c.myelin(ctx, "lab", "down")
}

// up brings the lab up and moves the legacy nodes to legacy host routing. Once lab up
// has succeeded the lab is owned, so the last release removes it even after an error.
func (c *Cluster) up(ctx context.Context) error {
	if lab.Running(c.Paths) {
		return errors.New("a lab is already running on this machine and bench builds its own: run myelin lab down first")
	}
	upCtx, cancel := context.WithTimeout(ctx, labUpTimeout)
	defer cancel()
	if err := c.myelin(upCtx, c.Spec.upArgs()...); err != nil {
		// A failed lab up removes what it built; whatever it still left (it was
		// killed) is this cluster's to remove, and nothing else is.
		_, planErr := lab.LoadPlan(c.Paths)
		c.owned = lab.Running(c.Paths) || planErr == nil
		return err
	}
	c.owned = true
	kube, err := newKubeClients(c.Paths)
	if err != nil {
		return err
	}
	c.kube = kube
	if err := c.applyNodeConfig(ctx, "myelin-bench-legacy", c.Spec.LegacyNodes, map[string]string{"host-routing": "legacy"}); err != nil {
		return err
	}
	return c.applyNodeConfig(ctx, "myelin-bench-no-source-check", c.Spec.NoSourceCheckNodes,
		map[string]string{"enable-source-ip-verification": "false"})
}

// applyNodeConfig applies one NodeConfig giving nodes the defaults (host-routing:
// legacy on the legacy nodes, for one) and restarts their agents so that they read it.
func (c *Cluster) applyNodeConfig(ctx context.Context, name string, nodes []string, defaults map[string]string) error {
	if len(nodes) == 0 {
		return nil
	}
	if err := c.kube.createNodeConfig(ctx, name, nodes, defaults); err != nil {
		return err
	}
	for _, node := range nodes {
		if err := c.myelin(ctx, "lab", "restart", "agent-"+node); err != nil {
			return err
		}
		if err := waitAgentReady(ctx, node); err != nil {
			return err
		}
	}
	return nil
}

// myelin runs the myelin binary with args. An interrupt reaches it as SIGINT (and the
// death of the bench as SIGTERM), so `lab up` removes what it built before exiting.
func (c *Cluster) myelin(ctx context.Context, args ...string) error {
	self, err := c.binary()
	if err != nil {
		return err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = labDownTimeout
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("myelin %s: %w: %s", strings.Join(args, " "), err, lastLines(out.String(), 3))
	}
	return nil
}

// lastLines returns the last n non-empty lines of s joined by "; ".
func lastLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}
