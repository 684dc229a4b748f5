package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/testenv"
)

// An answer without the agent's JSON (another server on the socket, a proxy, a crash
// mid-answer) still gives an error that says what was asked, what came back and where.
func TestClientAnswerWithoutJSON(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   []string
		is     error
	}{
		{http.StatusInternalServerError, "oops", []string{"POST /v1/ipam/c1", "500 Internal Server Error", "without the agent's error message"}, nil},
		{http.StatusServiceUnavailable, "", []string{"503 Service Unavailable"}, ErrUnavailable},
		{http.StatusOK, "<html>", []string{"read the answer to POST /v1/ipam/c1", "is it the myelin agent?"}, nil},
	} {
		sock := testenv.ServeUnixHTTP(t, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(c.status)
			_, _ = w.Write([]byte(c.body))
		})
		_, err := NewClient(sock).Allocate(context.Background(), PodRef{ContainerID: "c1"})
		if err == nil || c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("status %d %q: %v, want an error (%v)", c.status, c.body, err, c.is)
			continue
		}
		for _, w := range append(c.want, sock) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("status %d %q: %q lacks %q", c.status, c.body, err, w)
			}
		}
	}
}

// An agent that does not answer (gone, its socket left but nobody listening, hung
// until the caller gives up) is ErrUnavailable, naming the socket.
func TestClientAgentDown(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.sock")
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	entered := make(chan struct{})
	hung := testenv.ServeUnixHTTP(t, func(_ http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done()
	})
	for _, sock := range []string{missing, stale, hung} {
		ctx, cancel := context.WithCancel(context.Background())
		if sock == hung {
			go func() { <-entered; cancel() }() // the caller's deadline, once the agent has the request
		}
		_, err := NewClient(sock).Allocate(ctx, PodRef{ContainerID: "c1"})
		cancel()
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), sock) {
			t.Errorf("agent on %s: %v, want ErrUnavailable naming the socket", sock, err)
		}
	}
}

// A failed ADD's release names its attempt (escaped), and a release without one
// (an agent that named none) sends none: the agent then frees the IP as before.
func TestClientReleaseNamesTheAttempt(t *testing.T) {
	got := make(chan string, 1)
	sock := testenv.ServeUnixHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.URL.RequestURI()
		w.WriteHeader(http.StatusNoContent)
	})
	for attempt, want := range map[string]string{
		"AB3/+": "DELETE /v1/ipam/c1?attempt=AB3%2F%2B",
		"":      "DELETE /v1/ipam/c1",
	} {
		if err := NewClient(sock).Release(context.Background(), "c1", attempt); err != nil {
			t.Fatal(err)
		}
		if req := <-got; req != want {
			t.Errorf("Release with attempt %q asked %q, want %q", attempt, req, want)
		}
	}
}
