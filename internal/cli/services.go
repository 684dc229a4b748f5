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

// ServicesOptions are the flags of `myelin services`.
type ServicesOptions struct {
	Node, Socket, Output string
}

// Services prints the Service frontends programmed in a node's datapath, each with
// its backends and whether they take new connections.
func Services(ctx context.Context, out io.Writer, o ServicesOptions) error {
	socks, err := sockets(o.Socket, o.Node, false)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	svcs, err := api.NewClient(socks[0]).Services(ctx)
	if err != nil {
		return escapedError{err} // the agent's text
	}
	if o.Output == "json" {
		return printJSON(out, svcs)
	}
	if svcs.ServedBy != "myelin" {
		fmt.Fprintf(out, "Node %s: Services are served by %s (kube-proxy-replacement is false); myelin programs none.\n", printable(svcs.Node), printable(svcs.ServedBy))
		return nil
	}
	state := "synced"
	if !svcs.Synced {
		state = "still programming the Services that existed at start"
	}
	fmt.Fprintf(out, "Node %s: %d frontends, backend selection %s, %s\n\n", printable(svcs.Node), len(svcs.Frontends), printable(svcs.Algorithm), state)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tPORT\tTYPE\tFRONTEND\tAFFINITY\tBACKENDS")
	for _, f := range svcs.Frontends {
		var bs []string
		for _, b := range f.Backends {
			s := b.Address
			switch {
			case b.State != "active":
				s += " (" + b.State + ")"
			case b.Local:
				s += " (local)"
			}
			bs = append(bs, s)
		}
		backends := strings.Join(bs, ", ")
		if len(f.Backends) == 0 {
			backends = "none: new connections are rejected"
		}
		typ := f.Type
		if f.ExternalTrafficPolicy != "" {
			// Outside clients get the (local) backends only, the node's own clients any.
			typ += " (external " + f.ExternalTrafficPolicy + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", printable(orDash(f.Service)), printable(orDash(f.Port)), printable(typ),
			printable(f.Frontend), printable(orDash(f.Affinity)), printable(backends))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
