package agent

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
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
	if v == nil {
		writeJSON(w, http.StatusOK, out)
		return
	}
	writeJSON(w, http.StatusOK, policyStatus(a.cfg.Node, v))
}

// policyStatus is the API view of one computation.
func policyStatus(node string, v *policyView) api.PolicyStatus {
	out := api.PolicyStatus{Node: node, Synced: true, Started: v.started, Applied: v.applied, Took: v.duration.String(), Writes: v.writes,
		Identities: v.state.Identities, IPCache: len(v.state.IPCache), Policies: len(v.input.Policies),
		Endpoints: []api.PolicyEndpoint{}}
	if v.err != nil {
		out.Error = v.err.Error()
	}
	for _, pr := range v.state.Problems {
		out.Problems = append(out.Problems, pr.String())
	}
	for ip, ep := range v.state.Endpoints {
		out.Endpoints = append(out.Endpoints, api.PolicyEndpoint{Pod: ep.Pod, IP: ip.String(),
			Identity:        v.state.IPCache[netip.PrefixFrom(ip, 32)],
			Ingress:         enforcement(ep.Flags, datapath.PolicyIngress, datapath.PolicyIngressIncomplete),
			Egress:          enforcement(ep.Flags, datapath.PolicyEgress, datapath.PolicyEgressIncomplete),
			IngressPolicies: ep.IngressPolicies, EgressPolicies: ep.EgressPolicies, Entries: len(ep.Entries), Problems: ep.Problems})
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
	s.Policy = sum
}
