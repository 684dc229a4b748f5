package main

import (
	"github.com/spf13/cobra"

	"github.com/myelin-net/myelin/internal/cli"
)

func uiCommand() *cobra.Command {
	var o cli.UIOptions
	cmd := &cobra.Command{
		Use:   "ui [--listen 127.0.0.1:12000]",
		Short: "Serve the service map: namespaces, pods and Services with the flows between them, drops in red, a live flow table",
		Long: `Serve the service map page (docs/ui.md) over the flows of every agent this machine
reaches (every lab node), or of one agent with --socket. Open http://<listen>/ in a
browser; the page takes keep=N (flows it keeps, default 1000), window=DURATION (how
recent the graph's flows are, default 5m) and namespace=NS (repeatable) as query
parameters. The page fetches nothing from the internet.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Stderr = cmd.ErrOrStderr()
			return cli.UI(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Listen, "listen", "127.0.0.1:12000", "host:port to serve the page on (loopback by default: the page has no authentication)")
	f.StringSliceVar(&o.AllowedHosts, "allowed-host", nil, "a host name (any port) or host:port the page may be reached by besides localhost, 127.0.0.1, [::1] and --listen, e.g. a Service's name; repeatable. Requests naming another Host are refused (DNS rebinding)")
	f.StringVar(&o.Socket, "socket", "", "one agent's API socket (default: every agent on this machine)")
	return cmd
}
