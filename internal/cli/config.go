package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/myelin-net/myelin/internal/api"
)

// ConfigOptions are the flags of `myelin config`.
type ConfigOptions struct {
	Node, Socket, Output string
}

// Config prints a node's effective configuration with the source of every key.
func Config(ctx context.Context, out io.Writer, o ConfigOptions) error {
	socks, err := sockets(o.Socket, o.Node, false)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	view, err := api.NewClient(socks[0]).Config(ctx)
	if err != nil {
		return escapedError{err} // the agent's text
	}
	if o.Output == "json" {
		return printJSON(out, view)
	}
	fmt.Fprintf(out, "Node %s (effective since the agent started)\n", printable(view.Node))
	if view.Warning != "" {
		fmt.Fprintf(out, "WARNING: %s\n", printable(view.Warning))
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
	for _, e := range view.Effective {
		v := e.Value
		if v == "" {
			v = "(none)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", printable(e.Key), printable(v), printable(e.Source)) // values are the ConfigMap's
	}
	return tw.Flush()
}
