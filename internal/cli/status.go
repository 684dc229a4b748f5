package cli

import (
	"context"
	"encoding/json"
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
	for _, s := range socks {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := api.NewClient(s).Status(ctx)
		cancel()
		if err != nil {
			failed = append(failed, err.Error())
			continue
		}
		all = append(all, st)
	}
	if o.Output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		var v any = all
		if !o.All && len(all) == 1 {
			v = all[0]
		}
		if err := enc.Encode(v); err != nil {
			return err
		}
	} else {
		for i, st := range all {
			if i > 0 {
				fmt.Fprintln(out)
			}
			printStatus(out, st)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s", strings.Join(failed, "; "))
	}
	return nil
}

func printStatus(out io.Writer, s api.Status) {
	row := func(k, format string, a ...any) {
		fmt.Fprintf(out, "%-22s "+format+"\n", append([]any{k + ":"}, a...)...)
	}
	row("Node", "%s (agent up %v)", s.Node, time.Since(s.Started).Round(time.Second))
	if s.Config.Warning != "" {
		row("Configuration", "WARNING: %s", s.Config.Warning)
	} else {
		row("Configuration", "%s", s.Config.Sources)
	}
	k8s := "Disconnected: " + s.Kubernetes.Error
	if s.Kubernetes.Connected {
		k8s = "Ok, " + s.Kubernetes.Version
	}
	row("Kubernetes", "%s", k8s)
	row("Datapath", "%s, %s attach, uplink %s", s.Datapath.Device, s.Datapath.AttachMode, s.Datapath.Uplink)
	row("Routing", "Network: %s   Host: %s (%s)", s.Routing.Mode, s.Routing.HostRouting, s.Routing.HostRoutingReason)
	if s.Routing.Mode == "tunnel" {
		row("Tunnels", "%d nodes over VXLAN", s.Routing.Routes)
	} else if s.Routing.AutoDirectNodeRoutes {
		row("Node routes", "%d direct routes (auto-direct-node-routes)", s.Routing.Routes)
	}
	for _, u := range s.Routing.Unroutable {
		row("  no route", "%s", u)
	}
	row("Masquerading", "%s", s.Masquerade)
	if s.SourceCheck.Enabled {
		row("Source validation", "on: pods send only from their own IPv4 and MAC")
	} else {
		row("Source validation", "OFF")
		row("  WARNING", "%s", s.SourceCheck.Warning)
	}
	guardText := s.Guard.Setting
	if len(s.Guard.Found) > 0 {
		guardText += "; user rules in " + strings.Join(s.Guard.Found, ", ")
	}
	row("User firewall guard", "%s", guardText)
	if s.Guard.Warning != "" {
		row("  WARNING", "%s", s.Guard.Warning)
	}
	row("Services", "%s", s.KubeProxy)
	row("MTU", "device %d, routes %d", s.MTU.Device, s.MTU.Route)
	row("IPAM", "%d/%d allocated from %s", s.IPAM.Used, s.IPAM.Total, s.IPAM.CIDR)
	row("Endpoints", "%d", s.Endpoints)
	row("Nodes", "%d known", s.Nodes.Known)
	var maps []string
	for _, m := range s.Maps {
		maps = append(maps, fmt.Sprintf("%s %d/%d", m.Name, m.Entries, m.Max))
	}
	row("BPF maps", "%s", strings.Join(maps, ", "))
	if s.NAT.Ports != "" {
		row("NAT ports", "%s (outside the node's ephemeral ports)", s.NAT.Ports)
	}
	if np := s.NAT.NodePort; np != nil {
		row("NodePort SNAT", "%d flows created, %d completed their handshake, ~%d evicted before it, %d replies found their flow evicted",
			np.Created, np.Promoted, np.Evicted, np.RepliesLost)
	}
	for _, w := range s.NAT.Warnings {
		row("  WARNING", "%s", w)
	}
	for _, c := range s.Counters {
		row("Counter", "%-12s %-20s %d packets, %d bytes", c.Direction, c.Reason, c.Packets, c.Bytes)
	}
	for _, l := range s.Loops {
		state := "ok"
		if l.LastError != "" {
			state = fmt.Sprintf("last error %v ago: %s", time.Since(l.ErrorTime).Round(time.Second), l.LastError)
		}
		row("Loop "+l.Name, "%s", state)
	}
}
