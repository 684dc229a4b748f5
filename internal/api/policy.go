package api

import (
	"context"
	"net/url"
	"time"
)

// PolicyStatus is a node's NetworkPolicy enforcement (GET /v1/policy).
type PolicyStatus struct {
	Node string `json:"node"`
	// Synced is false until the agent's informers synced and its first
	// computation was applied; until then the pinned state of the previous
	// agent (if any) enforces.
	Synced bool `json:"synced"`
	// Started is when the last computation began (it includes every change
	// the agent's informers had seen by then); Applied when it was written.
	Started    time.Time        `json:"started,omitempty"`
	Applied    time.Time        `json:"applied,omitempty"`
	Took       string           `json:"took,omitempty"` // compute and apply of the last run
	Writes     int              `json:"writes"`         // map writes of the last run
	Error      string           `json:"error,omitempty"`
	Identities int              `json:"identities"`
	IPCache    int              `json:"ipcache"`
	Policies   int              `json:"policies"`
	Endpoints  []PolicyEndpoint `json:"endpoints"`
	Problems   []string         `json:"problems,omitempty"`
	// HostAddresses are the node's own addresses the datapath holds: what the
	// host's stack sends into a pod from one of them (or from the node IP) is
	// the node's traffic, which isolated pods let in (kubelet probes).
	HostAddresses []string `json:"hostAddresses,omitempty"`
}

// PolicyEndpoint is one local pod's enforcement.
type PolicyEndpoint struct {
	Pod      string `json:"pod"`
	IP       string `json:"ip"`
	Identity uint32 `json:"identity"`
	// Ingress and Egress are "off" (not isolated), "on", or "on, incomplete"
	// (some allows could not be written: the pod fails closed).
	Ingress         string   `json:"ingress"`
	Egress          string   `json:"egress"`
	IngressPolicies []string `json:"ingressPolicies,omitempty"`
	EgressPolicies  []string `json:"egressPolicies,omitempty"`
	Entries         int      `json:"entries"`
	Problems        []string `json:"problems,omitempty"`
}

// PolicyVerdict is one direction of a trace.
type PolicyVerdict struct {
	Isolated  bool     `json:"isolated"`
	Allowed   bool     `json:"allowed"`
	By        []string `json:"by,omitempty"`        // policies whose rules allow it
	Isolating []string `json:"isolating,omitempty"` // policies that isolate the pod
}

// PolicyTrace answers GET /v1/policy/trace?from=ns/pod&to=ns/pod&port=80/TCP.
type PolicyTrace struct {
	From    string        `json:"from"`
	To      string        `json:"to"`
	Port    string        `json:"port"`
	Allowed bool          `json:"allowed"`
	Egress  PolicyVerdict `json:"egress"`
	Ingress PolicyVerdict `json:"ingress"`
}

// Policy returns the node's NetworkPolicy enforcement.
func (c *Client) Policy(ctx context.Context) (PolicyStatus, error) {
	var out PolicyStatus
	err := c.do(ctx, "GET", "/v1/policy", nil, &out)
	return out, err
}

// PolicyTrace asks whether from (namespace/pod) may open a connection to
// to on port ("80/TCP").
func (c *Client) PolicyTrace(ctx context.Context, from, to, port string) (PolicyTrace, error) {
	var out PolicyTrace
	q := url.Values{"from": {from}, "to": {to}, "port": {port}}
	err := c.do(ctx, "GET", "/v1/policy/trace?"+q.Encode(), nil, &out)
	return out, err
}
