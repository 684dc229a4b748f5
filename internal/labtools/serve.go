package labtools

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Serve runs the lab's small HTTP server until ctx ends: the external host runs it on
// 203.0.113.10:80, and pods can run it as their command. Each response names the
// server and the client address it saw, so tests can tell which backend answered and
// whether the source was translated. It also answers UDP datagrams on the same port
// with "server=NAME client=IP:PORT", and BigUDP requests with a reply of the asked
// size.
//
// When ctx ends (SIGTERM from the lab kubelet deleting the pod) it keeps serving for
// drain, as a real server with a preStop delay does, so clients that still pick it
// until the Service's endpoints are updated get answers, then shuts down.
func Serve(ctx context.Context, listen, name string, drain time.Duration) error {
	stopped := make(chan struct{})
	go func() {
		<-ctx.Done()
		time.Sleep(drain)
		close(stopped)
	}()
	udp, err := net.ListenPacket("udp", listen)
	if err != nil {
		return fmt.Errorf("serve UDP on %s: %w", listen, err)
	}
	go func() {
		<-stopped
		udp.Close()
	}()
	go serveUDP(udp, name)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(w, "server=%s client=%s\n", name, host)
	})
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-stopped
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve HTTP on %s: %w", listen, err)
	}
	return nil
}

func serveUDP(conn net.PacketConn, name string) {
	buf := make([]byte, bigUDPMax+1)
	for {
		n, addr, err := conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if big := bigUDPAnswer(buf[:n], name, addr); big != nil {
			_, _ = conn.WriteTo(big, addr)
			continue
		}
		_, _ = conn.WriteTo([]byte(fmt.Sprintf("server=%s client=%s\n", name, addr)), addr)
	}
}
