package datapath

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/testenv"
)

// sockConnects is how many sockets the helper's connect loop opens per run.
const sockConnects = 50000

// BenchmarkSocketLBConnect is what socket-LB costs a connect(): a helper process in
// the backends' netns opens a UDP socket, connects it and closes it, sockConnects
// times, and reports the mean wall time of one round (socket, connect, close). off:
// outside socket-LB's cgroup; direct: in it, to a backend's address (connect4 looks
// the destination up and finds no Service); service: in it, to the Service (connect4
// picks a backend and keeps the frontend in the socket's storage, freed with the
// socket). The difference between service and direct is what a Service connection
// pays over a direct one in connect(), close included. Run as root:
// go test -run '^$' -bench SocketLBConnect -count 5 ./internal/datapath/
func BenchmarkSocketLBConnect(b *testing.B) {
	testenv.RequireRoot(b, "load BPF and attach cgroup programs")
	d := loadLB(b, HostRoutingLegacy, 0)
	cg := attachSockLB(b, d, Service{ID: 1, Backends: []uint32{1, 2}})
	inBackendsNetns(b, func(nsName string, _ netns.NsHandle) {
		for _, c := range []struct{ name, cgroup, addr string }{
			{"off", "", "10.1.0.20:8080"},
			{"direct", cg, "10.1.0.20:8080"},
			{"service", cg, sockSvcAddr},
		} {
			b.Run(c.name, func(b *testing.B) {
				var total float64
				for b.Loop() {
					out, err := runSockClient(b, nsName, c.cgroup, "connect-loop", c.addr)
					ns, perr := strconv.ParseFloat(strings.TrimPrefix(out, "ns="), 64)
					if err != nil || perr != nil {
						b.Fatalf("connect loop to %s: %v: %s", c.addr, err, out)
					}
					total += ns
				}
				b.ReportMetric(total/float64(b.N), "ns/connect")
			})
		}
	})
}

// connectLoop opens, connects and closes a UDP socket to addr sockConnects times and
// returns the mean time of one round ("ns=<mean>").
func connectLoop(addr string) (string, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return "", err
	}
	to := &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	start := time.Now()
	for range sockConnects {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		err = unix.Connect(fd, to)
		unix.Close(fd)
		if err != nil {
			return "", fmt.Errorf("connect %s: %w", addr, err)
		}
	}
	return fmt.Sprintf("ns=%.1f", float64(time.Since(start).Nanoseconds())/sockConnects), nil
}
