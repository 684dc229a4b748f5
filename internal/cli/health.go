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

// HealthOptions are the flags of `myelin health`.
type HealthOptions struct {
	Node, Socket, Output string
	All                  bool
}

// Health prints the node health matrix of one or all agents: every peer node,
// whether it is reachable over the node network and the pod network, latencies, and
// the last failure.
func Health(ctx context.Context, out io.Writer, o HealthOptions) error {
	if o.Output != "text" && o.Output != "json" {
		return fmt.Errorf("-o %q: use text or json", o.Output)
	}
	socks, err := sockets(o.Socket, o.Node, o.All)
	if err != nil {
		return err
	}
	var all []api.HealthMatrix
	var failed []string
	for _, s := range socks {
		m, err := healthMatrix(ctx, s)
		if err != nil {
			failed = append(failed, printable(err.Error()))
			continue
		}
		all = append(all, m)
	}
	if o.Output == "json" {
		if err := printJSON(out, oneOrAll(all, o.All)); err != nil {
			return err
		}
	} else {
		for i, m := range all {
			if i > 0 {
				fmt.Fprintln(out)
			}
			PrintHealth(out, m, time.Now())
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s", strings.Join(failed, "; "))
	}
	return nil
}

func healthMatrix(ctx context.Context, socket string) (api.HealthMatrix, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return api.NewClient(socket).HealthMatrix(ctx)
}

// PrintHealth prints one node's matrix as a table, a peer a row; times are relative
// to now.
func PrintHealth(out io.Writer, m api.HealthMatrix, now time.Time) {
	fmt.Fprintf(out, "Node %s: health address %s, port %d, every peer probed every %s\n", printable(m.Node), printable(m.HealthIP), m.Port, printable(m.Interval))
	if len(m.Peers) == 0 {
		fmt.Fprintln(out, "no other nodes")
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tNODE IP\tVIA NODE\tICMP\tHTTP\tVIA POD NETWORK\tHTTP\tSINCE\tLAST FAILURE")
	for _, p := range m.Peers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printable(p.Name), printable(p.NodeIP), printable(p.ViaNode()),
			latency(p.ICMP), latency(p.NodeHTTP), printable(p.ViaPod()), latency(p.PodHTTP), ago(since(p), now), lastFailure(p, now))
	}
	tw.Flush()
}

// latency is a path's last latency, or its state when it has none.
func latency(h api.PathHealth) string {
	if h.State != api.PathOK {
		return "-"
	}
	return time.Duration(h.LatencySeconds * float64(time.Second)).Round(time.Microsecond).String()
}

// since is when the peer entered its state: for a failing peer when its first
// failing path began failing, else when its last path became ok (or unknown).
func since(p api.PeerHealth) time.Time {
	paths := []api.PathHealth{p.ICMP, p.NodeHTTP, p.PodHTTP}
	var t time.Time
	for _, h := range paths {
		if h.State == api.PathFailing && (t.IsZero() || h.Since.Before(t)) {
			t = h.Since
		}
	}
	if !t.IsZero() {
		return t
	}
	for _, h := range paths {
		if h.Since.After(t) {
			t = h.Since
		}
	}
	return t
}

// lastFailure is the peer's most recent failure: when, on which path, and why.
func lastFailure(p api.PeerHealth, now time.Time) string {
	var last api.PathHealth
	var path string
	for _, c := range []struct {
		name string
		h    api.PathHealth
	}{{"icmp", p.ICMP}, {"node http", p.NodeHTTP}, {"pod http", p.PodHTTP}} {
		if c.h.LastFailure.After(last.LastFailure) {
			last, path = c.h, c.name
		}
	}
	if last.LastFailure.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%s ago (%s): %s", ago(last.LastFailure, now), path, printable(last.LastError))
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String()
}

// health is the status row of the node health matrix.
func (r statusRows) health(s api.Status) {
	if s.Health == nil {
		r.row("Node health", "not probing (starting, or cluster-health-port is 0)")
		return
	}
	r.row("Node health", "%d/%d peers reachable (myelin health)", s.Health.Reachable, s.Health.Peers)
	for _, f := range s.Health.Failing {
		r.row("  unreachable", "%s", f)
	}
}
