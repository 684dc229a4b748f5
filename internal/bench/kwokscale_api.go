package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/kwok"
	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/cni/myelin"
)

// The agent's requests are counted by the apiserver's API Priority and Fairness: three
// FlowSchemas match the agent's user (myelin.AgentUser, which the lab's relay shares)
// before any built-in one, and apiserver_flowcontrol_dispatched_requests_total counts
// the requests each matched.
const (
	fsAgentEvents = "myelin-agent-events" // Events it records
	fsAgentWrites = "myelin-agent-writes" // every other create, update, patch, delete
	fsAgentReads  = "myelin-agent-reads"  // get, list, watch
)

var writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}

// createAgentFlowSchemas creates the counting FlowSchemas (kept when present).
func createAgentFlowSchemas(ctx context.Context, cs kubernetes.Interface) error {
	rule := func(verbs []string, groups, resources []string) flowcontrolv1.PolicyRulesWithSubjects {
		return flowcontrolv1.PolicyRulesWithSubjects{
			Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser,
				User: &flowcontrolv1.UserSubject{Name: myelin.AgentUser}}},
			ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: verbs, APIGroups: groups, Resources: resources,
				ClusterScope: true, Namespaces: []string{flowcontrolv1.NamespaceEvery}}},
		}
	}
	all := []string{"*"}
	schemas := []struct {
		name       string
		precedence int32
		rule       flowcontrolv1.PolicyRulesWithSubjects
	}{
		{fsAgentEvents, 290, rule(writeVerbs, []string{"", "events.k8s.io"}, []string{"events"})},
		{fsAgentWrites, 291, rule(writeVerbs, all, all)},
		{fsAgentReads, 292, rule([]string{"get", "list", "watch"}, all, all)},
	}
	for _, s := range schemas {
		fs := &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: s.name},
			Spec: flowcontrolv1.FlowSchemaSpec{
				PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "workload-high"},
				MatchingPrecedence:         s.precedence,
				DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
				Rules:                      []flowcontrolv1.PolicyRulesWithSubjects{s.rule},
			}}
		if _, err := cs.FlowcontrolV1().FlowSchemas().Create(ctx, fs, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create FlowSchema %s: %w", s.name, err)
		}
	}
	return nil
}

// requestCounts are the agent's requests the apiserver dispatched so far.
type requestCounts struct{ writes, reads float64 }

// agentRequests reads the counters of the agent's FlowSchemas from the apiserver's
// metrics; writes include Events.
func agentRequests(ctx context.Context, cs kubernetes.Interface) (requestCounts, error) {
	b, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return requestCounts{}, fmt.Errorf("read the apiserver's metrics: %w", err)
	}
	var c requestCounts
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "apiserver_flowcontrol_dispatched_requests_total{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.Contains(line, `flow_schema="`+fsAgentEvents+`"`), strings.Contains(line, `flow_schema="`+fsAgentWrites+`"`):
			c.writes += v
		case strings.Contains(line, `flow_schema="`+fsAgentReads+`"`):
			c.reads += v
		}
	}
	return c, nil
}

// protoClient is a client of the lab's apiserver that lists in protobuf (cheaper to
// decode 50,000 pods) without client-side rate limits.
func (r *kwokRun) protoClient() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", r.cl.Paths.Kubeconfig())
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst, cfg.Dial = -1, 0, lab.Dial
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = cfg.ContentType + ",application/json"
	return kubernetes.NewForConfig(cfg)
}

// podBackends is the set of "IP:port" every simulated pod should be a backend as.
func (r *kwokRun) podBackends(ctx context.Context) (map[string]bool, error) {
	cs, err := r.protoClient()
	if err != nil {
		return nil, err
	}
	list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{ResourceVersion: "0", LabelSelector: kwok.PodSelector})
	if err != nil {
		return nil, fmt.Errorf("list the simulated pods: %w", err)
	}
	out := make(map[string]bool, len(list.Items))
	for _, p := range list.Items {
		if p.Status.PodIP != "" {
			out[p.Status.PodIP+":"+strconv.Itoa(kwok.TargetPort)] = true
		}
	}
	return out, nil
}

// readyAgainEvery is how long waitSlicesCurrent waits before it marks unready pods
// ready again (kwok.ReadyAgain), and again after each time.
const readyAgainEvery = 30 * time.Second

// readyAgain marks the simulated pods the node-lifecycle controller marked unready
// ready again, as their kubelets would, and says how many in the output.
func (r *kwokRun) readyAgain(ctx context.Context) error {
	n, err := kwok.ReadyAgain(ctx, r.cs)
	if n > 0 {
		fmt.Fprintf(r.w, "scale: marked %d pods ready again (the node-lifecycle controller had marked them unready: kwok renewed their node late)\n", n)
	}
	r.readied += n
	return err
}

// waitSlicesCurrent waits until the EndpointSlices' ready endpoints are exactly the
// running pods, marking pods ready again every readyAgainEvery.
func (r *kwokRun) waitSlicesCurrent(ctx context.Context) error {
	want, err := r.podBackends(ctx)
	if err != nil {
		return err
	}
	r.podIPs = len(want)
	cs, err := r.protoClient()
	if err != nil {
		return err
	}
	lastReady := time.Now()
	return poll(ctx, 3*time.Second, "the EndpointSlices to hold every pod", func() (bool, string, error) {
		if time.Since(lastReady) > readyAgainEvery {
			if err := r.readyAgain(ctx); err != nil {
				return false, "", err
			}
			lastReady = time.Now()
		}
		list, err := cs.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err.Error(), nil
		}
		have := map[string]bool{}
		for _, s := range list.Items {
			if !kwok.IsNamespace(s.Namespace) {
				continue
			}
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					for _, a := range e.Addresses {
						have[a+":"+strconv.Itoa(kwok.TargetPort)] = true
					}
				}
			}
		}
		d := diffSets(want, have)
		return d == "", d, nil
	})
}

// viewCount is what the agent's Services view showed of the simulated Services.
type viewCount struct {
	at                  time.Time
	frontends, backends int
	set                 map[string]bool
}

func (r *kwokRun) agentView(ctx context.Context) (viewCount, error) {
	s, err := api.NewClient(api.NodeSocket(r.node)).Services(ctx)
	v := viewCount{at: time.Now(), set: map[string]bool{}}
	if err != nil || !s.Synced {
		return v, err
	}
	for _, f := range s.Frontends {
		if !kwok.IsNamespace(f.Service) { // namespace/name
			continue
		}
		v.frontends++
		for _, b := range f.Backends {
			v.backends++
			v.set[b.Address] = true
		}
	}
	return v, nil
}

// waitViewComplete waits until the agent shows every simulated Service with as many
// backends as there are pods, asking every interval.
func (r *kwokRun) waitViewComplete(ctx context.Context, interval time.Duration) (viewCount, error) {
	var v viewCount
	err := poll(ctx, interval, "the agent to program every simulated Service", func() (bool, string, error) {
		var err error
		v, err = r.agentView(ctx)
		state := fmt.Sprintf("%d of %d frontends, %d of %d backends (%v)", v.frontends, r.sim.Services, v.backends, r.sim.Pods, err)
		return err == nil && v.frontends == r.sim.Services && v.backends == r.sim.Pods, state, nil
	})
	return v, err
}

// viewMatchesPods compares the agent's backends with the pods: "" when equal, else
// what differs.
func (r *kwokRun) viewMatchesPods(ctx context.Context) (string, error) {
	want, err := r.podBackends(ctx)
	if err != nil {
		return "", err
	}
	v, err := r.agentView(ctx)
	if err != nil {
		return "", err
	}
	return diffSets(want, v.set), nil
}

// diffSets says how have differs from want: "" when equal.
func diffSets(want, have map[string]bool) string {
	var missing, extra []string
	for k := range want {
		if !have[k] {
			missing = append(missing, k)
		}
	}
	for k := range have {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return ""
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return fmt.Sprintf("%d missing (e.g. %v), %d extra (e.g. %v)", len(missing), first(missing, 3), len(extra), first(extra, 3))
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// waitPolicy waits (up to 30 s) until the agent's policy loop has computed with every
// simulated pod in its ipcache (one entry per distinct address: kwok repeats some),
// and says whether it did.
func (r *kwokRun) waitPolicy(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := poll(ctx, 500*time.Millisecond, "the policy loop", func() (bool, string, error) {
		p, err := api.NewClient(api.NodeSocket(r.node)).Policy(ctx)
		return err == nil && p.Synced && p.IPCache >= r.podIPs, fmt.Sprintf("ipcache %d (%v)", p.IPCache, err), nil
	})
	return err == nil, nil
}

// labHTTP is the bench's HTTP client of lab addresses (an agent's metrics): it dials
// only through the lab's link (lab.Dial).
var labHTTP = &http.Client{Transport: &http.Transport{DialContext: lab.Dial}}

// httpGet returns the body of a GET of url, a lab address.
func httpGet(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := labHTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}
