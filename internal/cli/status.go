package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/myelin-net/myelin/internal/api"
)

// StatusOptions are the flags of `myelin status`.
type StatusOptions struct {
	Node, Socket, Output string
	All                  bool
	// Health adds each node's health matrix (`myelin health`) to the text output.
	Health bool
}

// Status prints the status of one or all agents.
func Status(ctx context.Context, out io.Writer, o StatusOptions) error {
	if o.Output != "text" && o.Output != "json" {
		return fmt.Errorf("-o %q: use text or json", o.Output)
	}
	socks, err := sockets(o.Socket, o.Node, o.All)
	if err != nil {
		return err
	}
	var all []api.Status
	var failed []string
	matrices := map[string]api.HealthMatrix{}
	for _, s := range socks {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := api.NewClient(s).Status(sctx)
		cancel()
		if err != nil {
			failed = append(failed, printable(err.Error()))
			continue
		}
		all = append(all, st)
		if o.Health {
			m, err := healthMatrix(ctx, s)
			if err != nil {
				failed = append(failed, printable(err.Error()))
			} else {
				matrices[st.Node] = m
			}
		}
	}
	if o.Output == "json" {
		if err := printJSON(out, oneOrAll(all, o.All)); err != nil {
			return err
		}
	} else {
		for i, st := range all {
			if i > 0 {
				fmt.Fprintln(out)
			}
			printStatus(out, st)
			if m, ok := matrices[st.Node]; ok {
				fmt.Fprintln(out)
				PrintHealth(out, m, time.Now())
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s", strings.Join(failed, "; "))
	}
	return nil
}

// printStatus prints one node's status, a "Key: value" row a line.
func printStatus(out io.Writer, s api.Status) {
	r := statusRows{out}
	r.node(s)
	r.routing(s)
	r.protection(s)
	r.row("Services", "%s", s.KubeProxy)
	if s.SocketLB != "" {
		r.row("Socket LB", "%s", s.SocketLB)
	}
	r.row("MTU", "device %d, routes %d", s.MTU.Device, s.MTU.Route)
	r.row("BIG TCP", "%s", bigTCPRow(s.BIGTCP))
	r.row("IPAM", "%d/%d allocated from %s", s.IPAM.Used, s.IPAM.Total, s.IPAM.CIDR)
	r.row("Endpoints", "%d", s.Endpoints)
	r.row("Nodes", "%d known", s.Nodes.Known)
	r.health(s)
	r.policy(s)
	r.maps(s)
	r.loops(s)
}

// bigTCPRow says whether IPv4 BIG TCP is on, and why not when the key asks for it.
func bigTCPRow(b api.BIGTCPInfo) string {
	switch {
	case !b.Enabled:
		return "off (enable-ipv4-big-tcp is false)"
	case b.Size == 0:
		return "off: " + printable(b.Reason)
	}
	return fmt.Sprintf("IPv4 %d KiB on %s and new pods' veths", b.Size/1024, printableList(b.Devices))
}

// policy is the NetworkPolicy row and its warnings.
func (r statusRows) policy(s api.Status) {
	if s.Policy == nil {
		r.row("NetworkPolicy", "not computed yet")
		return
	}
	r.row("NetworkPolicy", "%d policies, %d pods isolated (myelin endpoints)", s.Policy.Policies, s.Policy.Isolated)
	for _, w := range s.Policy.Warnings {
		r.row("  WARNING", "%s", w)
	}
}

// statusRows prints the rows of printStatus.
type statusRows struct{ out io.Writer }

// row prints "k: value". The agent's text comes in as a's strings (and k), escaped
// here; a value that mixes it with ours is built from printable pieces.
func (r statusRows) row(k, format string, a ...any) {
	for i, v := range a {
		if s, ok := v.(string); ok {
			a[i] = printable(s)
		}
	}
	fmt.Fprintf(r.out, "%-22s "+format+"\n", append([]any{printable(k) + ":"}, a...)...)
}

// printableList is ss, each escaped, joined by commas.
func printableList(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = printable(s)
	}
	return strings.Join(out, ", ")
}

// node prints the agent, its configuration, the apiserver and the datapath.
func (r statusRows) node(s api.Status) {
	r.row("Node", "%s (agent up %v)", s.Node, time.Since(s.Started).Round(time.Second))
	if s.Config.Warning != "" {
		r.row("Configuration", "WARNING: %s", s.Config.Warning)
	} else {
		r.row("Configuration", "%s", s.Config.Sources)
	}
	if s.Kubernetes.Connected {
		r.row("Kubernetes", "Ok, %s", s.Kubernetes.Version)
	} else {
		r.row("Kubernetes", "Disconnected: %s", s.Kubernetes.Error)
	}
	r.row("Datapath", "%s, %s attach, uplink %s", s.Datapath.Device, s.Datapath.AttachMode, s.Datapath.Uplink)
}

// routing prints the routing modes, the routes to other nodes and the nodes
// without one.
func (r statusRows) routing(s api.Status) {
	r.row("Routing", "Network: %s   Host: %s (%s)", s.Routing.Mode, s.Routing.HostRouting, s.Routing.HostRoutingReason)
	if s.Routing.Mode == "tunnel" {
		r.row("Tunnels", "%s over VXLAN, encapsulated by %s (%s)", count(s.Routing.Routes, "node"), s.Routing.Tunnel, s.Routing.TunnelReason)
	} else if s.Routing.AutoDirectNodeRoutes {
		r.row("Node routes", "%s (auto-direct-node-routes)", count(s.Routing.Routes, "direct route"))
	}
	for _, u := range s.Routing.Unroutable {
		r.row("  no route", "%s", u)
	}
}

// protection prints masquerade, source validation and the firewall guard.
func (r statusRows) protection(s api.Status) {
	r.row("Masquerading", "%s", s.Masquerade)
	if s.SourceCheck.Enabled {
		r.row("Source validation", "on: pods send only from their own IPv4 and MAC")
	} else {
		r.row("Source validation", "OFF")
		r.row("  WARNING", "%s", s.SourceCheck.Warning)
	}
	if s.SourceCheck.UplinkPodCIDR != "" {
		r.row("  from other hosts", "this node's PodCIDR %s is dropped as spoofed", s.SourceCheck.UplinkPodCIDR)
	} else if s.SourceCheck.UplinkOff != "" {
		r.row("  from other hosts", "this node's pod addresses are not checked: %s", s.SourceCheck.UplinkOff)
	}
	if s.SourceCheck.OtherNodesPods != "" {
		r.row("  other nodes' pods", "%s", s.SourceCheck.OtherNodesPods)
	}
	guardText := printable(s.Guard.Setting)
	if len(s.Guard.Found) > 0 {
		guardText += "; user rules in " + printableList(s.Guard.Found)
	}
	r.row("User firewall guard", "%s", guardText)
	if s.Guard.Warning != "" {
		r.row("  WARNING", "%s", s.Guard.Warning)
	}
}

// maps prints the BPF maps' fill, NAT and the datapath's counters.
func (r statusRows) maps(s api.Status) {
	var maps []string
	for _, m := range s.Maps {
		maps = append(maps, fmt.Sprintf("%s %d/%d", printable(m.Name), m.Entries, m.Max))
	}
	r.row("BPF maps", "%s", strings.Join(maps, ", "))
	if s.NAT.Ports != "" {
		r.row("NAT ports", "%s (outside the node's ephemeral ports)", s.NAT.Ports)
	}
	if np := s.NAT.NodePort; np != nil {
		r.row("NodePort SNAT", "%d flows created, %d TCP completed their handshake, %d UDP answered, ~%d evicted before that, %d replies found their flow evicted",
			np.Created, np.Promoted, np.UDPAnswered, np.Evicted, np.RepliesLost)
	}
	for _, w := range s.NAT.Warnings {
		r.row("  WARNING", "%s", w)
	}
	for _, c := range s.Counters {
		r.row("Counter", "%-12s %-20s %d packets, %d bytes", c.Direction, c.Reason, c.Packets, c.Bytes)
	}
}

// loops prints each control loop's last error, or ok.
func (r statusRows) loops(s api.Status) {
	for _, l := range s.Loops {
		state := "ok"
		if l.LastError != "" {
			state = fmt.Sprintf("last error %v ago: %s", time.Since(l.ErrorTime).Round(time.Second), printable(l.LastError))
		}
		r.row("Loop "+printable(l.Name), "%s", state)
	}
}

// count is n and noun, plural unless n is 1: "1 node", "3 nodes".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
