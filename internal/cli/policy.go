package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/myelin-net/myelin/internal/api"
)

// PolicyOptions are the flags of `myelin endpoints` and `myelin policy trace`.
type PolicyOptions struct {
	Node, Socket, Output string
	All                  bool
	// From, To and Port are the trace's question.
	From, To, Port string
}

// Endpoints prints each local pod of a node (or every lab node with All)
// with its NetworkPolicy identity and enforcement.
func Endpoints(ctx context.Context, out io.Writer, o PolicyOptions) error {
	socks, err := sockets(o.Socket, o.Node, o.All)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var all []api.PolicyStatus
	for _, s := range socks {
		st, err := api.NewClient(s).Policy(ctx)
		if err != nil {
			return escapedError{err}
		}
		all = append(all, st)
	}
	if o.Output == "json" {
		return printJSON(out, all)
	}
	for _, st := range all {
		writePolicyStatus(out, st)
	}
	return nil
}

// policyHostAddressesShown is how many of the node's addresses myelin policy
// prints; JSON has them all.
const policyHostAddressesShown = 16

func writePolicyStatus(out io.Writer, st api.PolicyStatus) {
	hosts := func() {
		if len(st.HostAddresses) == 0 {
			return
		}
		shown, more := st.HostAddresses, ""
		if len(shown) > policyHostAddressesShown { // kube-proxy's IPVS puts every Service address on the node
			shown, more = shown[:policyHostAddressesShown], fmt.Sprintf(" and %d more (-o json lists them)", len(st.HostAddresses)-policyHostAddressesShown)
		}
		fmt.Fprintf(out, "The node's own traffic into isolated pods is allowed from: %s%s\n", printable(strings.Join(shown, ", ")), more)
	}
	if !st.Synced {
		fmt.Fprintf(out, "Node %s: NetworkPolicy not computed yet (informers syncing); the pinned state enforces meanwhile\n", printable(st.Node))
		hosts()
		fmt.Fprintln(out)
		return
	}
	fmt.Fprintf(out, "Node %s: %d NetworkPolicies, %d identities, %d ipcache prefixes; last apply %s (%s, %d map writes)\n",
		printable(st.Node), st.Policies, st.Identities, st.IPCache, st.Applied.Format(time.TimeOnly), printable(st.Took), st.Writes)
	if st.Error != "" {
		fmt.Fprintf(out, "WARNING: last apply failed: %s\n", printable(st.Error))
	}
	for _, p := range st.Problems {
		fmt.Fprintf(out, "WARNING: %s\n", printable(p))
	}
	hosts()
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tIP\tIDENTITY\tINGRESS\tEGRESS\tPOLICIES")
	for _, ep := range st.Endpoints {
		pols := printable(strings.Join(uniq(append(append([]string{}, ep.IngressPolicies...), ep.EgressPolicies...)), ","))
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", printable(ep.Pod), printable(ep.IP), ep.Identity, printable(ep.Ingress), printable(ep.Egress), orDash(pols))
	}
	_ = tw.Flush()
	for _, ep := range st.Endpoints {
		for _, p := range ep.Problems {
			fmt.Fprintf(out, "WARNING: %s: %s\n", printable(ep.Pod), printable(p))
		}
	}
	fmt.Fprintln(out)
}

func uniq(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// PolicyTrace asks a node's agent whether From may connect to To on Port,
// and by which policies.
func PolicyTrace(ctx context.Context, out io.Writer, o PolicyOptions) error {
	if o.From == "" || o.To == "" || o.Port == "" {
		return fmt.Errorf("policy trace: --from, --to and --port are required, e.g. --from x/a --to y/b --port 80/TCP")
	}
	socks, err := sockets(o.Socket, o.Node, false)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tr, err := api.NewClient(socks[0]).PolicyTrace(ctx, o.From, o.To, o.Port)
	if err != nil {
		return escapedError{err}
	}
	if o.Output == "json" {
		return printJSON(out, tr)
	}
	writePolicyTrace(out, tr)
	return nil
}

func writePolicyTrace(out io.Writer, tr api.PolicyTrace) {
	verdict := "DENIED"
	if tr.Allowed {
		verdict = "ALLOWED"
	}
	from, to := printable(tr.From), printable(tr.To)
	fmt.Fprintf(out, "%s -> %s %s: %s\n", from, to, printable(tr.Port), verdict)
	fmt.Fprintf(out, "  egress of %s: %s\n", from, verdictText(tr.Egress))
	fmt.Fprintf(out, "  ingress of %s: %s\n", to, verdictText(tr.Ingress))
}

func verdictText(v api.PolicyVerdict) string {
	switch {
	case !v.Isolated:
		return "allowed (no policy isolates the pod)"
	case v.Allowed:
		return "allowed by " + printableList(v.By)
	}
	return "denied: isolated by " + printableList(v.Isolating) + ", no rule allows it"
}
