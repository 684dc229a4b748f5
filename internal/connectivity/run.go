package connectivity

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/podexec"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Run deploys the test namespace, runs every scenario, prints the table and removes
// the namespace (unless o.Keep). It fails when any scenario failed, naming them.
func Run(ctx context.Context, out io.Writer, o Options) error {
	start := time.Now()
	if err := o.validate(); err != nil {
		return err
	}
	if o.Exec == nil {
		o.Exec = podexec.API{Client: o.Client, Config: o.REST}
	}
	if err := checkPermissions(ctx, o); err != nil {
		return err
	}
	check := o.CheckMyelin
	if check == nil {
		check = func(ctx context.Context) error { return checkDaemonSet(ctx, o) }
	}
	if err := check(ctx); err != nil {
		return err
	}
	nodes, err := readNodes(ctx, o)
	if err != nil {
		return err
	}
	if o.Namespace == "" {
		o.Namespace = "myelin-connectivity-" + randomSuffix()
	}
	created, err := createNamespace(ctx, o)
	if err != nil {
		return err
	}
	if created {
		defer cleanup(out, o) // its own context: it runs after Ctrl-C too
	}
	fmt.Fprintf(out, "Deploying pods in namespace %s on %d node(s)...\n", o.Namespace, len(nodes))
	e, err := deploy(ctx, o, nodes)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Pods ready after %v; running the scenarios\n\n", time.Since(start).Round(100*time.Millisecond))
	results, err := runAll(ctx, o, e)
	printTable(out, results)
	fmt.Fprintf(out, "\n%d scenarios in %v\n", len(results), time.Since(start).Round(100*time.Millisecond))
	if err != nil {
		return err
	}
	return summary(results)
}

// runAll runs the scenarios without the NetworkPolicy, then those with it.
func runAll(ctx context.Context, o Options, e *env) ([]Result, error) {
	var results []Result
	var withPolicy []scenario
	for _, sc := range e.scenarios(o) {
		if !selected(o, sc.name) {
			continue
		}
		if sc.skip == "" && matches(o.Skip, sc.name) {
			sc.skip = "--skip"
		}
		if sc.policy {
			withPolicy = append(withPolicy, sc)
			continue
		}
		results = append(results, runScenario(ctx, o, e, sc))
	}
	if len(withPolicy) == 0 {
		return results, nil
	}
	if err := applyPolicy(ctx, o, e.ns); err != nil {
		return results, err
	}
	for _, sc := range withPolicy {
		results = append(results, runScenario(ctx, o, e, sc))
	}
	return results, removePolicy(ctx, o, e.ns)
}

func selected(o Options, name string) bool { return len(o.Only) == 0 || matches(o.Only, name) }

func matches(patterns []string, name string) bool {
	for _, s := range patterns {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// runScenario runs one probe, retrying while the cluster converges: an expected
// answer up to 3 times, an expected denial (policy being applied) up to 8 times.
func runScenario(ctx context.Context, o Options, e *env, sc scenario) Result {
	r := Result{Scenario: sc.name, From: e.at(sc.from), To: sc.to, Expect: sc.expect}
	if sc.skip != "" {
		r.Status, r.Detail = Skipped, sc.skip
		return r
	}
	start := time.Now()
	timeout, attempts := "3s", 3
	if sc.deny {
		timeout, attempts = "2s", 8
	}
	argv := append([]string{o.Myelin, "connectivity", "probe"}, sc.probe...)
	argv = append(argv, "--timeout", timeout)
	for i := 0; i < attempts; i++ {
		if i > 0 {
			time.Sleep(time.Second)
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		got, err := o.Exec.Exec(pctx, e.ns, sc.from, argv)
		cancel()
		switch {
		case !sc.deny && err == nil:
			r.Status, r.Detail = Passed, got
		case !sc.deny:
			r.Status, r.Detail = Failed, oneLine(got, err)
			continue
		case err != nil:
			r.Status, r.Detail = Passed, oneLine(got, err)
		default:
			r.Status, r.Detail = Failed, "answered: "+got
			continue
		}
		break
	}
	r.Duration = time.Since(start)
	return r
}

func oneLine(out string, err error) string {
	if s := podexec.FirstLine(out); s != "" {
		return strings.TrimPrefix(s, "myelin: ")
	}
	return err.Error()
}

// checkDaemonSet finds the chart's agent DaemonSet, kube-system/myelin (the chart
// installs nowhere else), and wants one agent ready. A DaemonSet of that name in
// another namespace, or one with the chart's labels anywhere, is not myelin's: a tenant
// could make either, and the check would pass on a cluster myelin does not run.
func checkDaemonSet(ctx context.Context, o Options) error {
	ds, err := o.Client.AppsV1().DaemonSets(config.ConfigMapNamespace).Get(ctx, agentDaemonSet, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("cannot look for the myelin agent DaemonSet: this user may not get daemonsets in %s (kubectl auth can-i get daemonsets -n %s)",
			config.ConfigMapNamespace, config.ConfigMapNamespace)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("no myelin agents found: this cluster has no DaemonSet %s/%s; install myelin first (docs/install.md)",
			config.ConfigMapNamespace, agentDaemonSet)
	case err != nil:
		return fmt.Errorf("get daemonset %s/%s: %w", config.ConfigMapNamespace, agentDaemonSet, err)
	case ds.Status.NumberReady == 0:
		return fmt.Errorf("myelin is installed but no agent is ready (daemonset %s/%s: 0 ready); check kubectl -n %s get pods -l app.kubernetes.io/name=myelin",
			ds.Namespace, ds.Name, ds.Namespace)
	}
	return nil
}

// agentDaemonSet is the chart's agent DaemonSet's name, in config.ConfigMapNamespace.
const agentDaemonSet = "myelin"
