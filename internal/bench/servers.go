package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/myelin-net/myelin/internal/logtail"
)

// serverReadyTimeout bounds how long a started server may take to listen.
const serverReadyTimeout = 10 * time.Second

// A server is a running server process of one environment, pinned to one vCPU.
type server struct {
	target Target
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan struct{}
}

// serverKey identifies a server process: one per environment, server and vCPU.
type serverKey struct {
	env, name string
	cpu       int
}

// servers starts and stops the servers of one stage and hands out their ports.
type servers struct {
	running  map[serverKey]*server
	nextPort map[string]int
}

func newServers() *servers {
	return &servers{running: map[serverKey]*server{}, nextPort: map[string]int{}}
}

// target returns the server for a case, starting it on first use.
func (s *servers) target(ctx context.Context, env string, ep Endpoints, spec *ServerSpec, cpu int) (Target, error) {
	key := serverKey{env: env, name: spec.Name, cpu: cpu}
	if srv, ok := s.running[key]; ok {
		return srv.target, nil
	}
	port := spec.BasePort + s.nextPort[spec.Name]
	s.nextPort[spec.Name]++
	srv, err := startServer(ctx, ep, spec, port, cpu)
	if err != nil {
		return Target{}, err
	}
	s.running[key] = srv
	return srv.target, nil
}

// stopAll kills every server and waits for it.
func (s *servers) stopAll() {
	for key, srv := range s.running {
		_ = srv.cmd.Process.Kill()
		<-srv.done
		delete(s.running, key)
	}
}

func startServer(ctx context.Context, ep Endpoints, spec *ServerSpec, port, cpu int) (*server, error) {
	srv := &server{target: Target{Addr: ep.ServerAddr, Port: port}, done: make(chan struct{})}
	// The server lives until stopAll (or until ctx ends: an interrupted run).
	srv.cmd = ep.Server.Command(ctx, cpu, spec.Argv(ep.ServerAddr, port)...)
	srv.cmd.Stderr = &srv.stderr
	if err := srv.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	go func() { _ = srv.cmd.Wait(); close(srv.done) }()
	if err := waitListening(ctx, ep.Server, port, srv.done); err != nil {
		_ = srv.cmd.Process.Kill()
		<-srv.done
		return nil, fmt.Errorf("start %s on %s port %d: %w %s", spec.Name, ep.ServerAddr, port, err, logtail.Last(srv.stderr.String()))
	}
	return srv, nil
}

var errServerExited = errors.New("server exited")

// waitListening polls ss in the server's namespace until a TCP or UDP socket listens on
// port (netserver listens on TCP, iperf3 on TCP for its control connection).
func waitListening(ctx context.Context, h Host, port int, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, serverReadyTimeout)
	defer cancel()
	filter := "sport = :" + strconv.Itoa(port)
	for {
		out, err := h.Command(ctx, -1, "ss", "-Hltn", filter).Output()
		if err == nil && strings.TrimSpace(string(out)) != "" {
			return nil
		}
		select {
		case <-exited:
			return errServerExited
		case <-ctx.Done():
			return fmt.Errorf("not listening after %s: %w", serverReadyTimeout, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
