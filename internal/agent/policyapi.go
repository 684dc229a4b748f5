package agent

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/policy"
)

// handlePolicy answers GET /v1/policy: each local pod's enforcement and identity.
func (a *server) handlePolicy(w http.ResponseWriter, _ *http.Request) {
	out := api.PolicyStatus{Node: a.cfg.Node, Endpoints: []api.PolicyEndpoint{}}
	p, _ := findView[*policyLoop](&a.views)
	var v *policyView
	if p != nil {
		v = p.view.Load()
	}
	if v != nil {
		out = policyStatus(a.cfg.Node, v, p.budgetProblems())
	}
	if a.dp != nil {
		addrs, err := a.dp.HostAddresses()
		for _, ip := range addrs {
			out.HostAddresses = append(out.HostAddresses, ip.String())
		}
		if err != nil {
			out.Problems = append(out.Problems, "host addresses: "+err.Error())
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// budgetProblems says, for each local pod over its share of the connection table,
// why its new connections are dropped; a failed read is one problem under the
// invalid address.
func (p *policyLoop) budgetProblems() map[netip.Addr]string {
	if p.overBudget == nil {
		return nil
	}
	over, err := p.overBudget()
	if err != nil {
		return map[netip.Addr]string{{}: err.Error()}
	}
	out := make(map[netip.Addr]string, len(over.PolicyCT))
	for ip, n := range over.PolicyCT {
		out[ip] = fmt.Sprintf("held %d tracked connections, over policy-ct-pod-max %d: its new connections to or from this node's isolated pods are dropped (DROP_POLICY_CT_BUDGET) until it holds fewer (a connection counts against the pod that sent the packet that made its entry when a node checked that pod's source: a pod of this node, in tunnel mode also one of another node; else against the pods of this node that accepted it)",
			n, over.PolicyCTMax)
	}
	return out
}

// remoteOverBudget is a problem for each listed sender that is no pod of this
// node (in tunnel mode a pod of another node pays for the connections it opens
// here; its endpoint is not in this view).
func remoteOverBudget(v *policyView, overBudget map[netip.Addr]string) []string {
	var out []string
	for _, ip := range slices.SortedFunc(maps.Keys(overBudget), netip.Addr.Compare) {
		if _, local := v.state.Endpoints[ip]; !local && ip.IsValid() {
			out = append(out, overBudgetWho(v, ip)+": "+overBudget[ip])
		}
	}
	return out
}

// overBudgetWho names the pod with address ip listed over its budget: a pod of
// this node by name, one of another node by name, address and node; an address
// no pod has (a node's health address, a pod gone since) as such.
func overBudgetWho(v *policyView, ip netip.Addr) string {
	if ep, ok := v.state.Endpoints[ip]; ok {
		return "pod " + ep.Pod
	}
	for _, pod := range v.input.Pods {
		if pod.IP == ip {
			return fmt.Sprintf("pod %s (%s) of node %s", pod.Ref(), ip, pod.Node)
		}
	}
	return "address " + ip.String() + " (no pod has it)"
}

// policyStatus is the API view of one computation, with the pods over their
// connection budget (budgetProblems).
func policyStatus(node string, v *policyView, overBudget map[netip.Addr]string) api.PolicyStatus {
	out := api.PolicyStatus{Node: node, Synced: true, Started: v.started, Applied: v.applied, Took: v.duration.String(), Writes: v.writes,
		Identities: v.state.Identities, IPCache: len(v.state.IPCache), Policies: len(v.input.Policies),
		Endpoints: []api.PolicyEndpoint{}}
	if v.err != nil {
		out.Error = v.err.Error()
	}
	for _, pr := range v.state.Problems {
		out.Problems = append(out.Problems, pr.String())
	}
	if msg, ok := overBudget[netip.Addr{}]; ok {
		out.Problems = append(out.Problems, msg)
	}
	out.Problems = append(out.Problems, remoteOverBudget(v, overBudget)...)
	for ip, ep := range v.state.Endpoints {
		problems := ep.Problems
		if msg, ok := overBudget[ip]; ok {
			problems = append(slices.Clip(problems), msg)
		}
		out.Endpoints = append(out.Endpoints, api.PolicyEndpoint{Pod: ep.Pod, IP: ip.String(),
			Identity:        v.state.IPCache[netip.PrefixFrom(ip, 32)],
			Ingress:         enforcement(ep.Flags, datapath.PolicyIngress, datapath.PolicyIngressIncomplete),
			Egress:          enforcement(ep.Flags, datapath.PolicyEgress, datapath.PolicyEgressIncomplete),
			IngressPolicies: ep.IngressPolicies, EgressPolicies: ep.EgressPolicies, Entries: len(ep.Entries), Problems: problems})
	}
	sort.Slice(out.Endpoints, func(i, j int) bool { return out.Endpoints[i].Pod < out.Endpoints[j].Pod })
	return out
}

func enforcement(f, on, incomplete datapath.PolicyFlags) string {
	switch {
	case f&on == 0:
		return "off"
	case f&incomplete != 0:
		return "on, incomplete"
	}
	return "on"
}

// handlePolicyTrace answers GET /v1/policy/trace?from=ns/pod&to=ns/pod&port=80/TCP
// from the last computation's input (any two pods of the cluster).
func (a *server) handlePolicyTrace(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, to, port := q.Get("from"), q.Get("to"), q.Get("port")
	proto, num, err := parsePolicyPort(port)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	p, _ := findView[*policyLoop](&a.views)
	var v *policyView
	if p != nil {
		v = p.view.Load()
	}
	if v == nil {
		writeError(w, http.StatusServiceUnavailable, errors.New("policy: the agent has not computed its policy state yet (informers syncing); try again"))
		return
	}
	src, ok := policy.FindPod(v.input.Pods, from)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("trace: no pod %q with an IPv4 address (want namespace/name of a running pod)", from))
		return
	}
	dst, ok := policy.FindPod(v.input.Pods, to)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("trace: no pod %q with an IPv4 address (want namespace/name of a running pod)", to))
		return
	}
	res := v.tracer.Trace(src, dst, proto, num)
	writeJSON(w, http.StatusOK, api.PolicyTrace{From: from, To: to, Port: port, Allowed: res.Allowed(),
		Egress: api.PolicyVerdict(res.Egress), Ingress: api.PolicyVerdict(res.Ingress)})
}

// parsePolicyPort parses "80/TCP" (protocol TCP, UDP or SCTP; TCP when left out).
func parsePolicyPort(s string) (uint8, uint16, error) {
	num, proto, _ := strings.Cut(s, "/")
	n, err := strconv.ParseUint(num, 10, 16)
	if err != nil || n == 0 {
		return 0, 0, fmt.Errorf("port %q: want PORT/PROTOCOL such as 80/TCP (port 1-65535)", s)
	}
	switch strings.ToUpper(proto) {
	case "", "TCP":
		return policy.ProtoTCP, uint16(n), nil
	case "UDP":
		return policy.ProtoUDP, uint16(n), nil
	case "SCTP":
		return policy.ProtoSCTP, uint16(n), nil
	}
	return 0, 0, fmt.Errorf("port %q: protocol %q: want TCP, UDP or SCTP", s, proto)
}

// fillStatus summarises the last computation for GET /v1/status.
func (p *policyLoop) fillStatus(s *api.Status) {
	v := p.view.Load()
	if v == nil {
		return
	}
	sum := &api.PolicySummary{Policies: len(v.input.Policies)}
	for _, ep := range v.state.Endpoints {
		if ep.Flags&(datapath.PolicyIngress|datapath.PolicyEgress) != 0 {
			sum.Isolated++
		}
	}
	for _, pr := range v.state.Problems {
		sum.Warnings = append(sum.Warnings, pr.String())
	}
	if v.err != nil {
		sum.Warnings = append(sum.Warnings, "apply: "+v.err.Error())
	}
	over := p.budgetProblems()
	for _, ip := range slices.SortedFunc(maps.Keys(over), netip.Addr.Compare) {
		msg, who := over[ip], "connection budget"
		if ip.IsValid() {
			who = overBudgetWho(v, ip)
		}
		sum.Warnings = append(sum.Warnings, who+": "+msg)
	}
	if w := p.evictionWarning(); w != "" {
		sum.Warnings = append(sum.Warnings, w)
	}
	s.Policy = sum
}

// evictionWarning says how many live connections new ones pushed out of the
// connection table in the last minute, and what that does, or "" for none.
func (p *policyLoop) evictionWarning() string {
	if p.evicted == nil {
		return ""
	}
	n, err := p.evicted()
	if err != nil {
		return "connection table: " + err.Error()
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("myelin_policy_ct pushed out %d connections in use in the last minute (both of their buckets were full): their next packets are judged by the policy again, and a reply the receiving pod's policy does not allow is dropped as DROP_POLICY_DENIED; raise policy-ct-max, or lower policy-ct-pod-max if one pod floods", n)
}
