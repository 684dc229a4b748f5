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

// serveHubble serves the Hubble Observer API over the node's flow store on the local
// socket and, when hubble-listen-address is set, on TCP for the relay, until ctx ends.
// GetNodes reports the TCP listener's address, with nodeIP for a wildcard one.
func serveHubble(ctx context.Context, cfg Config, listen string, nodeIP netip.Addr, store *flowstore.Store, log *slog.Logger) error {
	sock := HubbleSocket(cfg.StateDir)
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove stale hubble socket %s: %w", sock, err)
	}
	lis := []net.Listener{}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen on hubble socket %s: %w", sock, err)
	}
	lis = append(lis, l)
	if listen != "" {
		t, err := net.Listen("tcp", listen)
		if err != nil {
			l.Close()
			return fmt.Errorf("listen for the hubble relay on %s (hubble-listen-address): %w", listen, err)
		}
		lis = append(lis, t)
	}
	g := grpc.NewServer(hubble.ServerOptions()...)
	hubble.Register(g, hubble.NewServer(hubble.Config{
		Node: cfg.Node, Address: hubble.NodeAddress(lis[len(lis)-1].Addr(), nodeIP), Version: version.Version, Source: store,
		Stats: func() hubble.Stats {
			st := store.Stats()
			return hubble.Stats{Stored: st.Stored, Capacity: st.Capacity, Seen: st.Added}
		},
	}))
	for _, l := range lis {
		go func() {
			if err := g.Serve(l); err != nil {
				log.Error("serve hubble api", "addr", l.Addr().String(), "err", err)
			}
		}()
	}
	go func() {
		<-ctx.Done()
		g.Stop()
	}()
	log.Info("hubble api", "socket", sock, "listen", listen)
	return nil
}
