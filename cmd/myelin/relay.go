package main

import (
	"log/slog"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/myelin-net/myelin/internal/relay"
	"github.com/myelin-net/myelin/internal/version"
)

func relayCommand() *cobra.Command {
	o := relay.Options{Version: version.Version}
	cmd := &cobra.Command{
		Use:   "relay [--listen ADDR] [--peer NAME=HOST:PORT ...]",
		Short: "Serve the Hubble Observer API for the whole cluster, merging every agent's flows (hubble observe --server HOST:4245)",
		Long: "relay serves the Hubble Observer API (hubble observe, hubble status) for the cluster: it finds the agents from the\n" +
			"Kubernetes Nodes (InternalIP on --peer-port) or the --peer flags, merges their flows in time order, and reports\n" +
			"nodes it cannot reach as unavailable without holding up the others. See docs/hubble.md.\n\n" +
			"Without --tls-client-ca-files the relay has NO authentication: whoever reaches --listen reads every flow of every node. The default\n" +
			"listens on loopback only; listen on a pod or node address (the chart uses --listen=:4245) only where a\n" +
			"NetworkPolicy or firewall limits who connects (docs/hubble.md, \"Exposure\"). Without --follow it returns at most\n" +
			"the newest " + strconv.Itoa(relay.MaxLast) + " flows (--last N with a larger N, or none, gets that many).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return relay.Run(cmd.Context(), o, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Listen, "listen", "127.0.0.1:4245", "host:port to serve the Hubble API on, without authentication (\":4245\": every address of the host or pod)")
	f.StringArrayVar(&o.Peers, "peer", nil, "an agent's Hubble address, name=host:port or host:port (repeat; default: discover from the Nodes)")
	f.IntVar(&o.PeerPort, "peer-port", 4244, "the agents' Hubble port (hubble-listen-address) on discovered Nodes' InternalIP; agents listening on loopback only are unreachable")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig to list Nodes with (default: in-cluster)")
	f.StringVar(&o.DialDevice, "dial-device", "", "send to the apiserver and the agents only through this network device (SO_BINDTODEVICE; the lab sets its link myelin-cp so nothing leaves the machine by its default route); default: as the routes say")
	f.StringVar(&o.TLS.CertFile, "tls-cert-file", "", "PEM certificate: serve --listen over TLS 1.3 (with --tls-key-file; hubble observe --tls --tls-ca-cert-files ...)")
	f.StringVar(&o.TLS.KeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	f.StringSliceVar(&o.TLS.ClientCAFiles, "tls-client-ca-files", nil, "PEM CA files: accept only clients with a certificate they signed (mutual TLS; without, any client reads the flows over TLS, and the startup line says client-certificates=\"not required\")")
	f.StringSliceVar(&o.TLS.ClientNames, "tls-client-names", nil, "accept only client certificates whose DNS name (or common name, without one) is one of these (needs --tls-client-ca-files; default: any certificate those CAs signed)")
	f.StringVar(&o.PeerTLS.CAFile, "peer-tls-ca-file", "", "PEM CA that signed the agents' certificates: connect to the agents over TLS (their hubble-tls-cert-file)")
	f.StringVar(&o.PeerTLS.CertFile, "peer-tls-cert-file", "", "PEM client certificate for agents that require one (hubble-tls-client-ca-files; needs --peer-tls-ca-file and --peer-tls-key-file)")
	f.StringVar(&o.PeerTLS.KeyFile, "peer-tls-key-file", "", "PEM private key of --peer-tls-cert-file")
	f.StringVar(&o.PeerTLS.ServerName, "peer-tls-server-name", "", "name every agent's certificate carries (needs --peer-tls-ca-file; default: the agent's IP, which its certificate must then list)")
	return cmd
}
