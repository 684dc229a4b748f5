package conformance

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/myelin-net/myelin/internal/images"
	"github.com/myelin-net/myelin/internal/statefile"
)

// FullFocus is what `make conformance` runs (docs/conformance.md): every [sig-network]
// conformance test, the NetworkPolicy suite, and the Services, Networking, HostPort,
// Conntrack and DNS tests.
var FullFocus = []string{
	`\[sig-network\].*\[Conformance\]`,
	`\[sig-network\] Netpol `,
	`\[sig-network\] (Services|Networking|HostPort|Conntrack|DNS) `,
}

// FullSkip leaves out what the lab can't offer: a cloud (LoadBalancer, ESIPP), other
// address families and SCTP, the Internet (Networking-IPv4 and Networking-DNS dial
// 8.8.8.8 and google.com, the Forward PTR lookup test first resolves 8.8.8.8's name
// through the cluster's upstream; the lab forwards nothing off the machine), feature-gated and
// alpha/beta features other than NetworkPolicy, and disruptive or flaky tests.
var FullSkip = []string{
	`\[Feature:(Networking-IPv4|Networking-DNS|SCTP|SCTPConnectivity|IPv6DualStack|ServiceCIDRs|Networking-IPv6|Networking-Performance|NoSNAT|PerformanceDNS|KubeProxyDaemonSetMigration|KubeProxyDaemonSetUpgrade|Example|ProxyTerminatingEndpoints|ServiceLBMode|LoadBalancer|TrafficDistribution)\]`,
	`\[Alpha\]|\[Beta\]|\[Disruptive\]|\[Flaky\]|\[Feature:GCEAlphaFeature\]|\[Feature:Ingress`,
	`LoadBalancer|ESIPP|\[Provider:|GCE|AWS|Azure`,
	`DNS configMap nameserver Forward PTR lookup`,
}

// Suite is an e2e.test binary and where it runs.
type Suite struct {
	Binary     string // e2e.test
	Ginkgo     string // the ginkgo CLI for parallel runs ("" or missing: serial)
	Kubeconfig string
}

// Check names the first missing piece: e2e.test, or an e2e image archive.
func (s Suite) Check(cache string) error {
	if _, err := os.Stat(s.Binary); err != nil {
		return fmt.Errorf("e2e.test not found at %s; build it with: make setup (scripts/build-e2e.sh)", s.Binary)
	}
	for _, image := range images.E2ENames {
		if a := images.E2EArchive(cache, image); !exists(a) {
			return fmt.Errorf("e2e image %s: archive %s not found; build it with: make setup images (myelin images build --e2e)", images.E2ERef(image), a)
		}
	}
	return nil
}

// Run is one run of the suite.
type Run struct {
	Focus, Skip []string // regular expressions; a test matching any Focus and no Skip runs
	Procs       int      // parallel processes (with the ginkgo CLI)
	Nodes       int      // the cluster's schedulable nodes (e2e.test --num-nodes); 0 means 2
	Timeout     time.Duration
	OutDir      string // e2e.log, report.json, repo-list.yaml
}

// Run runs the suite once and returns its report. Progress goes to progress (the
// suite's own output is in OutDir/e2e.log). It fails only when the suite could not run
// or wrote no report; failed tests are in the Result.
func (s Suite) Run(ctx context.Context, r Run, progress io.Writer) (Result, error) {
	if err := statefile.OutDir(r.OutDir); err != nil {
		return Result{}, err
	}
	repoList := filepath.Join(r.OutDir, "repo-list.yaml")
	if err := os.WriteFile(repoList, []byte(images.E2ERepoList()), 0o644); err != nil {
		return Result{}, err
	}
	logf, err := os.Create(filepath.Join(r.OutDir, "e2e.log"))
	if err != nil {
		return Result{}, err
	}
	defer logf.Close()
	report, _ := filepath.Abs(filepath.Join(r.OutDir, "report.json"))
	_ = os.Remove(report)
	ctx, cancel := context.WithTimeout(ctx, r.Timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Binary, s.args(r, report)...)
	if s.Ginkgo != "" && exists(s.Ginkgo) && r.Procs > 1 {
		cmd = exec.CommandContext(ctx, s.Ginkgo, s.ginkgoArgs(r, report)...)
	}
	cmd.Env = append(os.Environ(), "KUBE_TEST_REPO_LIST="+repoList)
	cmd.Stdout, cmd.Stderr = logf, logf
	fmt.Fprintf(progress, "conformance: %s (log %s)\n", strings.Join(cmd.Args, " "), logf.Name())
	stop := watchImages(ctx, s.Kubeconfig, progress)
	start := time.Now()
	runErr := cmd.Run()
	missing := stop()
	res, err := ReadReport(report)
	if err != nil {
		return Result{}, fmt.Errorf("e2e.test ended (%v) after %s without a report: %w; see %s", runErr, time.Since(start).Round(time.Second), err, logf.Name())
	}
	res.Duration, res.MissingImages = time.Since(start), missing
	fmt.Fprintf(progress, "conformance: %s in %s\n", res.Summary(), res.Duration.Round(time.Second))
	return res, nil
}

// suiteFlags are e2e.test's own flags.
func (s Suite) suiteFlags(r Run) []string {
	nodes := r.Nodes
	if nodes == 0 {
		nodes = 2
	}
	return []string{"--kubeconfig=" + s.Kubeconfig, "--provider=skeleton", "--dns-domain=cluster.local",
		fmt.Sprintf("--num-nodes=%d", nodes), "--e2e-output-dir=" + r.OutDir}
}

func (s Suite) args(r Run, report string) []string {
	args := []string{"--ginkgo.focus=" + strings.Join(r.Focus, "|"), "--ginkgo.no-color", "--ginkgo.timeout=" + r.Timeout.String(),
		"--ginkgo.json-report=" + report}
	if len(r.Skip) > 0 {
		args = append(args, "--ginkgo.skip="+strings.Join(r.Skip, "|"))
	}
	return append(args, s.suiteFlags(r)...)
}

func (s Suite) ginkgoArgs(r Run, report string) []string {
	args := []string{"run", fmt.Sprintf("--procs=%d", r.Procs), "--focus=" + strings.Join(r.Focus, "|"), "--no-color",
		"--timeout=" + r.Timeout.String(), "--json-report=" + filepath.Base(report), "--output-dir=" + filepath.Dir(report)}
	if len(r.Skip) > 0 {
		args = append(args, "--skip="+strings.Join(r.Skip, "|"))
	}
	return append(append(args, s.Binary, "--"), s.suiteFlags(r)...)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
