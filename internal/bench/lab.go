package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/cni/myelin"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labdriver"
	"github.com/myelin-net/myelin/internal/logtail"
)

// Bounds of the lab steps; a lab comes up in about a minute on a small VM.
const (
	labUpTimeout   = 10 * time.Minute
	labDownTimeout = 5 * time.Minute
	labPodTimeout  = 2 * time.Minute
)

// LabSpec is the lab a stage runs in: the flags of `myelin lab up`, and the NodeConfigs
// that give some nodes other settings before the measurements.
type LabSpec struct {
	Nodes          int
	CNI            string // --cni: labplan.CNIMyelin, labplan.CNIBridge or labplan.CNIFlannel
	Profile        string // myelin's profile (CNI myelin only)
	FlannelBackend string // "vxlan" or "host-gw" (CNI flannel only)
	KubeProxy      string // --kube-proxy: "iptables" or "nftables"; "" runs none
	Overrides      []NodeOverride
}

// NodeOverride is a NodeConfig of a bench lab: the nodes named get the settings.
type NodeOverride struct {
	Name     string
	Nodes    []string
	Settings map[string]string
}

// upArgs is the command line of `myelin lab up` for the spec.
func (s LabSpec) upArgs() []string {
	args := []string{"lab", "up", "--new", "--nodes", strconv.Itoa(s.Nodes), "--cni", s.CNI}
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
	Paths  labplan.Paths

	refs  int   // environments holding the lab, and the runner's holds between stages
	ups   int   // successful lab ups so far: what an environment put into an earlier one is gone
	tried bool  // up was attempted since the lab was last down
	err   error // the outcome of that attempt
	owned bool  // this cluster ran lab up, so lab down is its to run
	kube  *kubeClients
}

// NewCluster returns the (not yet built) lab of spec in the default lab directory.
func NewCluster(spec LabSpec) *Cluster {
	return &Cluster{Spec: spec, Paths: labplan.Paths{Dir: labplan.DefaultDir}}
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
	if _, err := os.Stat(lab.EtcdBin()); err != nil {
		return fmt.Errorf("etcd %s not built (%s missing): run make setup", lab.EtcdVersion, lab.EtcdBin())
	}
	flavour := lab.FlavourOf(labplan.CNI(c.Spec.CNI))
	if flavour == nil {
		return fmt.Errorf("lab spec --cni %q: unknown CNI", c.Spec.CNI)
	}
	for _, t := range flavour.Tools(self) {
		if _, err := exec.LookPath(t.Path); err != nil {
			return fmt.Errorf("needs %s, which is missing: %s", t.Path, t.Fix)
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

// hold keeps the lab up (once it is) until the matching release, without bringing it
// up: the runner holds the labs of the next stage while the current one tears down, so
// consecutive stages on one lab share it.
func (c *Cluster) hold() { c.refs++ }

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
// NodeIP is the underlay address of the lab node named node, from the lab's plan.
func (c *Cluster) NodeIP(node string) (netip.Addr, error) {
	plan, err := lab.LoadPlan(c.Paths)
	if err != nil {
		return netip.Addr{}, err
	}
	n, ok := plan.Node(node)
	if !ok {
		return netip.Addr{}, fmt.Errorf("the lab has no node %s", node)
	}
	return n.IP, nil
}

func (c *Cluster) up(ctx context.Context) error {
	if lab.Running(c.Paths) {
		return errors.New("a lab is already running on this machine and bench builds its own: run myelin lab down first")
	}
	upCtx, cancel := context.WithTimeout(ctx, labUpTimeout)
	defer cancel()
	if err := c.myelin(upCtx, c.Spec.upArgs()...); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == lab.ExitRefused {
			return err // it built nothing: what runs there (a lab, a lab command) is another's
		}
		// A failed lab up removes what it built; whatever it still left (it was
		// killed) is this cluster's to remove, and nothing else is.
		_, planErr := lab.LoadPlan(c.Paths)
		c.owned = lab.Running(c.Paths) || planErr == nil
		return err
	}
	c.owned = true
	c.ups++
	kube, err := newKubeClients(c.Paths)
	if err != nil {
		return err
	}
	c.kube = kube
	for _, o := range c.Spec.Overrides {
		if err := c.override(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// override applies one NodeConfig and restarts the agents of its nodes so that they
// read it.
func (c *Cluster) override(ctx context.Context, o NodeOverride) error {
	if err := c.kube.CreateNodeConfig(ctx, config.ConfigMapNamespace, "myelin-bench-"+o.Name,
		labdriver.HostnameSelector(o.Nodes...), o.Settings); err != nil {
		return err
	}
	for _, node := range o.Nodes {
		if err := c.myelin(ctx, "lab", "restart", myelin.AgentProcess(node)); err != nil {
			return err
		}
		ready, cancel := context.WithTimeout(ctx, labPodTimeout)
		err := labdriver.WaitAgentReady(ready, node)
		cancel()
		if err != nil {
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
		return fmt.Errorf("myelin %s: %w: %s", strings.Join(args, " "), err, strings.Join(logtail.Lines(out.String(), 3), "; "))
	}
	return nil
}
