package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"google.golang.org/grpc"

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

// serveHubble serves the Hubble Observer API over the node's flow store on the local
// socket and, when hubble-listen-address is set, on TCP for the relay (over TLS when
// hubble-tls-* are set), until ctx ends. GetNodes reports the TCP listener's address,
// with the node's IP for a wildcard one.
func serveHubble(ctx context.Context, cfg Config, hl hubbleListen, store *flowstore.Store, log *slog.Logger) error {
	var creds grpc.ServerOption
	if hl.TLS.Enabled() {
		c, err := hl.TLS.Credentials("hubble-tls-cert-file, hubble-tls-key-file, hubble-tls-client-ca-files")
		if err != nil {
			return err
		}
		creds = grpc.Creds(c)
	}
	sock := HubbleSocket(cfg.StateDir)
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove stale hubble socket %s: %w", sock, err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen on hubble socket %s: %w", sock, err)
	}
	addr := l.Addr()
	var tcp net.Listener
	if hl.Addr != "" {
		if tcp, err = net.Listen("tcp", hl.Addr); err != nil {
			l.Close()
			return fmt.Errorf("listen for the hubble relay on %s (hubble-listen-address): %w", hl.Addr, err)
		}
		addr = tcp.Addr()
	}
	obs := hubble.NewServer(hubble.Config{
		Node: cfg.Node, Address: hubble.NodeAddress(addr, hl.NodeIP), Version: version.Version, Source: store,
		Stats: func() hubble.Stats {
			st := store.Stats()
			return hubble.Stats{Stored: st.Stored, Capacity: st.Capacity, Seen: st.Added}
		},
	})
	g := grpc.NewServer(hubble.ServerOptions()...)
	hubble.Register(g, obs)
	serveGRPC(ctx, g, l, log)
	if tcp != nil {
		gt := g
		if creds != nil {
			gt = grpc.NewServer(append(hubble.ServerOptions(), creds)...)
			hubble.Register(gt, obs)
		}
		serveGRPC(ctx, gt, tcp, log)
	}
	log.Info("hubble api", "socket", sock, "listen", hl.Addr, "tls", creds != nil)
	return nil
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
