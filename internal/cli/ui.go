package cli

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/flowclient"
	"github.com/myelin-net/myelin/internal/hubble"
	"github.com/myelin-net/myelin/internal/ui"
)

// UIOptions are the flags of `myelin ui`.
type UIOptions struct {
	Listen string // host:port of the page
	Socket string // one agent; default every agent on this machine (every lab node)
	Server string // a Hubble Observer API (the relay) instead of the agents' sockets
	// ServerTLS is how to reach Server over TLS (--tls-*); zero is plaintext.
	ServerTLS hubble.ClientTLS
	// AllowedHosts are the names (or host:port) the page may be reached by besides
	// loopback and Listen (a Service's name, a port-forward's host).
	AllowedHosts []string
	Stderr       io.Writer
}

// uiTLSFlags name `myelin ui`'s --tls-* flags in errors.
var uiTLSFlags = hubble.ClientTLSNames{CAFile: "--tls-ca-file", CertFile: "--tls-client-cert-file",
	KeyFile: "--tls-client-key-file", ServerName: "--tls-server-name", Server: "the relay (--server)"}

// UI serves the service map over the flows of every agent this machine reaches until
// ctx ends.
func UI(ctx context.Context, out io.Writer, o UIOptions) error {
	if o.Server != "" {
		if o.Socket != "" {
			return fmt.Errorf("--server and --socket both given: read either the relay (--server) or one agent (--socket)")
		}
		if _, _, err := net.SplitHostPort(o.Server); err != nil {
			return fmt.Errorf("--server %q: %w (give host:port, e.g. myelin-relay:4245)", o.Server, err)
		}
		creds, err := o.ServerTLS.Credentials(uiTLSFlags)
		if err != nil {
			return err
		}
		src := hubble.NewClientSource(o.Server, creds)
		defer src.Close()
		return ui.Run(ctx, o.Listen, src, out, o.AllowedHosts...)
	}
	if o.ServerTLS.Enabled() {
		given := o.ServerTLS.Given(uiTLSFlags)
		return fmt.Errorf("%s given without --server: TLS is for reading the relay (a Hubble API) with --server host:port, the agents' sockets need none; add --server or drop %s", given, given)
	}
	if _, err := sockets(o.Socket, "", o.Socket == ""); err != nil {
		return fmt.Errorf("find the agents for the service map: %w", err)
	}
	return ui.Run(ctx, o.Listen, agentsSource{socket: o.Socket, stderr: o.Stderr}, out, o.AllowedHosts...)
}

// agentsSource finds the agents again for each page, so the page keeps working
// across a lab's nodes coming and going (`myelin lab down`, then up).
type agentsSource struct {
	socket string
	stderr io.Writer
}

func (a agentsSource) Flows(ctx context.Context, req flow.Request, out chan<- *flow.Flow) error {
	socks, err := sockets(a.socket, "", a.socket == "")
	if err != nil {
		return err
	}
	src := flowclient.NewAgentsSource(socks)
	if a.stderr != nil {
		src.OnError = func(sock string, err error) {
			fmt.Fprintf(a.stderr, "myelin ui: %s: %s\n", sock, printable(err.Error()))
		}
	}
	return src.Flows(ctx, req, out)
}
