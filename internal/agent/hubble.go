package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"

	"google.golang.org/grpc"

	"github.com/myelin-net/myelin/internal/connlimit"
	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/flowstore"
	"github.com/myelin-net/myelin/internal/hubble"
	"github.com/myelin-net/myelin/internal/version"
)

// HubbleSocket is the node's Hubble Observer socket in its state directory (what
// `hubble observe --server unix://<state dir>/hubble.sock` reads on the node).
func HubbleSocket(stateDir string) string { return filepath.Join(stateDir, "hubble.sock") }

// hubbleListen is where the agent serves the Hubble API over TCP and how.
type hubbleListen struct {
	Addr   string           // hubble-listen-address; "" for the socket only
	NodeIP netip.Addr       // reported by GetNodes for a wildcard Addr
	TLS    hubble.ServerTLS // hubble-tls-*; only for Addr, the socket stays plain
}

// hubbleTLSKeys name the hubble-tls-* configuration keys in errors.
var hubbleTLSKeys = hubble.ServerTLSNames{CertFile: "hubble-tls-cert-file", KeyFile: "hubble-tls-key-file",
	ClientCAFiles: "hubble-tls-client-ca-files", ClientNames: "hubble-tls-client-names"}

// creds are the TCP listener's TLS credentials, nil for plaintext. TLS settings without
// a TCP listener are an error: they would protect nothing (the socket stays plain).
func (hl hubbleListen) creds() (grpc.ServerOption, error) {
	if !hl.TLS.Enabled() {
		return nil, nil
	}
	if hl.Addr == "" {
		return nil, fmt.Errorf("hubble TLS (hubble-tls-*) set with hubble-listen-address empty: TLS is only for the TCP listener (the node's socket stays plain); set hubble-listen-address (e.g. \":4244\") or remove the hubble-tls-* keys")
	}
	c, err := hl.TLS.Credentials(hubbleTLSKeys)
	if err != nil {
		return nil, err
	}
	return grpc.Creds(c), nil
}

// serveHubble serves the Hubble Observer API over the node's flow store on the local
// socket and, when hubble-listen-address is set, on TCP for the relay (over TLS when
// hubble-tls-* are set), until ctx ends. GetNodes reports the TCP listener's address,
// with the node's IP for a wildcard one. Its log line says whether the TCP listener
// requires client certificates (without, whoever reaches it reads the node's flows).
func serveHubble(ctx context.Context, cfg Config, hl hubbleListen, store *flowstore.Store, log *slog.Logger) error {
	creds, err := hl.creds()
	if err != nil {
		return err
	}
	sock := HubbleSocket(cfg.StateDir)
	l, err := listenUnixPrivate(sock)
	if err != nil {
		return fmt.Errorf("hubble: %w", err)
	}
	addr := l.Addr()
	var tcp net.Listener
	if hl.Addr != "" {
		if tcp, err = net.Listen("tcp", hl.Addr); err != nil {
			l.Close()
			return fmt.Errorf("listen for the hubble relay on %s (hubble-listen-address): %w", hl.Addr, err)
		}
		addr = tcp.Addr()
		tcp = connlimit.Clients.Wrap(tcp, "hubble api (hubble-listen-address)", log)
	}
	observer := func(src flow.Source) *hubble.Server {
		return hubble.NewServer(hubble.Config{
			Node: cfg.Node, Address: hubble.NodeAddress(addr, hl.NodeIP), Version: version.Version, Source: src,
			Stats: func() hubble.Stats {
				st := store.Stats()
				return hubble.Stats{Stored: st.Stored, Capacity: st.Capacity, Seen: st.Added}
			},
		})
	}
	g := grpc.NewServer(hubble.ServerOptions()...)
	hubble.Register(g, observer(localSource{store}))
	serveGRPC(ctx, g, l, log)
	if tcp != nil {
		opts := hubble.ServerOptions()
		if creds != nil {
			opts = append(opts, creds)
		}
		gt := grpc.NewServer(opts...)
		hubble.Register(gt, observer(store))
		serveGRPC(ctx, gt, tcp, log)
	}
	log.Info("hubble api", "socket", sock, "listen", hl.Addr, "tls", creds != nil,
		"client-certificates", hl.TLS.ClientCertificates(), "client-names", hl.TLS.ClientNamesText())
	return nil
}

// localSource is a flow.Source whose requests come from the node's own sockets
// (root only): their follow streams and reads of stored flows have slots of their
// own (flowstore.LocalFollowers, flowstore.LocalHistoryReaders).
type localSource struct{ flow.Source }

func (l localSource) Flows(ctx context.Context, req flow.Request, out chan<- *flow.Flow) error {
	return l.Source.Flows(flowstore.Local(ctx), req, out)
}

// serveGRPC serves g on l until ctx ends.
func serveGRPC(ctx context.Context, g *grpc.Server, l net.Listener, log *slog.Logger) {
	go func() {
		if err := g.Serve(l); err != nil {
			log.Error("serve hubble api", "addr", l.Addr().String(), "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		g.Stop()
	}()
}
