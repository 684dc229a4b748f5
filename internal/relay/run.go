package relay

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/myelin-net/myelin/internal/connlimit"
	"github.com/myelin-net/myelin/internal/hubble"
	"github.com/myelin-net/myelin/internal/netns"
)

// Options are `myelin relay`'s flags.
type Options struct {
	Listen     string   // host:port to serve on
	Peers      []string // --peer values; none: discover from the Nodes
	PeerPort   int      // the agents' Hubble port (hubble-listen-address) for discovered nodes
	Kubeconfig string   // "" = in-cluster
	DialDevice string   // --dial-device: send only through this device; "" = as routed
	Version    string
	TLS        hubble.ServerTLS // the relay's own API (--tls-*)
	PeerTLS    hubble.ClientTLS // to the agents (--peer-tls-*)
}

// serverTLSFlags and peerTLSFlags name the --tls-* and --peer-tls-* flags in errors.
var (
	serverTLSFlags = hubble.ServerTLSNames{CertFile: "--tls-cert-file", KeyFile: "--tls-key-file", ClientCAFiles: "--tls-client-ca-files",
		ClientNames: "--tls-client-names"}
	peerTLSFlags = hubble.ClientTLSNames{CAFile: "--peer-tls-ca-file", CertFile: "--peer-tls-cert-file",
		KeyFile: "--peer-tls-key-file", ServerName: "--peer-tls-server-name", Server: "the agents"}
)

// Run serves the relay until ctx ends. Its startup line says whether the API is TLS
// and whether it requires client certificates (without, whoever connects reads every
// flow).
func Run(ctx context.Context, o Options, log *slog.Logger) error {
	discover, err := discovery(o, log)
	if err != nil {
		return err
	}
	cfg := Config{Discover: discover, Version: o.Version}
	if o.DialDevice != "" {
		dial := netns.DialThrough(o.DialDevice)
		cfg.PeerDial = func(ctx context.Context, addr string) (net.Conn, error) { return dial(ctx, "tcp", addr) }
	}
	if cfg.ServerCreds, err = o.TLS.Credentials(serverTLSFlags); err != nil {
		return err
	}
	if cfg.PeerCreds, err = o.PeerTLS.Credentials(peerTLSFlags); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s (--listen): %w", o.Listen, err)
	}
	lis = connlimit.Clients.Wrap(lis, "hubble relay (--listen)", log)
	r := New(cfg)
	defer r.Close()
	log.Info("hubble relay", "listen", lis.Addr().String(), "peers", peersText(o), "tls", o.TLS.Enabled(),
		"client-certificates", o.TLS.ClientCertificates(), "client-names", o.TLS.ClientNamesText(), "peer-tls", o.PeerTLS.Enabled())
	return r.Serve(ctx, lis)
}

func discovery(o Options, log *slog.Logger) (Discovery, error) {
	if len(o.Peers) > 0 {
		var peers []Peer
		for _, s := range o.Peers {
			p, err := ParsePeer(s)
			if err != nil {
				return nil, err
			}
			peers = append(peers, p)
		}
		return Static(peers), nil
	}
	if o.PeerPort < 1 || o.PeerPort > 65535 {
		return nil, fmt.Errorf("--peer-port %d: want the agents' Hubble port, 1-65535 (default 4244)", o.PeerPort)
	}
	var rc *rest.Config
	var err error
	if o.Kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config (--kubeconfig %q; empty means in-cluster): %w", o.Kubeconfig, err)
	}
	rc.Timeout = 10 * time.Second
	if o.DialDevice != "" {
		rc.Dial = netns.DialThrough(o.DialDevice)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("create kubernetes client: %w", err)
	}
	return FromNodes(cs, o.PeerPort, log), nil
}

func peersText(o Options) string {
	if len(o.Peers) > 0 {
		return fmt.Sprint(o.Peers)
	}
	return fmt.Sprintf("every Node's InternalIP on port %d", o.PeerPort)
}
