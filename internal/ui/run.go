package ui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/myelin-net/myelin/internal/connlimit"
	"github.com/myelin-net/myelin/internal/flow"
)

// Run serves the service map over src on listen (host:port) until ctx ends, and
// says where on out. Requests must name the listen address, a loopback name or one of
// allowedHosts in their Host header (see Handler.AllowHosts).
func Run(ctx context.Context, listen string, src flow.Source, out io.Writer, allowedHosts ...string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on --listen %q: %w (use a free host:port, e.g. 127.0.0.1:12000)", listen, err)
	}
	ln = connlimit.Shared.Wrap(ln, "service map (--listen)", nil)
	// Requests live in ctx, so open flow streams end with it and Shutdown is quick.
	h := New(src)
	h.AllowHosts(append([]string{listen, ln.Addr().String()}, allowedHosts...)...)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	fmt.Fprintf(out, "myelin ui: the service map is on http://%s/\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve the service map: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("stop the service map: %w", err)
	}
	return nil
}
