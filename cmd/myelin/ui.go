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
reaches (every lab node), of one agent with --socket, or of a Hubble Observer API
(the relay, every node of a cluster) with --server host:port. Open http://<listen>/ in a
browser; the page takes keep=N (flows it keeps, default 1000), window=DURATION (how
recent the graph's flows are, default 5m) and namespace=NS (repeatable) as query
parameters. The page fetches nothing from the internet. Requests must name localhost,
127.0.0.1, [::1], the --listen address or an --allowed-host in their Host header.
The page itself has no authentication: whoever reaches --listen sees every flow the
server gives it. A relay with TLS (hubble.tls.enabled) is read with --tls-ca-file,
--tls-client-cert-file, --tls-client-key-file and --tls-server-name (docs/hubble.md, "TLS").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Stderr = cmd.ErrOrStderr()
			return cli.UI(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Listen, "listen", "127.0.0.1:12000", "host:port to serve the page on (loopback by default: the page has no authentication)")
	f.StringSliceVar(&o.AllowedHosts, "allowed-host", nil, "a host name (any port) or host:port the page may be reached by besides localhost, 127.0.0.1, [::1] and --listen, e.g. a Service's name; repeatable. Requests naming another Host are refused (DNS rebinding)")
	f.StringVar(&o.Server, "server", "", "read flows from a Hubble Observer API at host:port (the relay, e.g. myelin-relay:4245) instead of the agents' sockets")
	f.StringVar(&o.Socket, "socket", "", "one agent's API socket (default: every agent on this machine)")
	f.StringVar(&o.ServerTLS.CAFile, "tls-ca-file", "", "PEM CA that signed --server's certificate: connect to --server over TLS 1.3 (the relay's --tls-cert-file)")
	f.StringVar(&o.ServerTLS.CertFile, "tls-client-cert-file", "", "PEM client certificate for a --server that requires one (the relay's --tls-client-ca-files)")
	f.StringVar(&o.ServerTLS.KeyFile, "tls-client-key-file", "", "PEM private key of --tls-client-cert-file")
	f.StringVar(&o.ServerTLS.ServerName, "tls-server-name", "", "name --server's certificate carries (default: --server's host)")
	return cmd
}
