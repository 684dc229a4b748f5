package labtools

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// With a first port, the flows leave from it and the ports after it: the server sees
// exactly those sources.
func TestUDPFlowsFirstPort(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var mu sync.Mutex
	var ports []int
	go func() {
		buf := make([]byte, 64)
		for {
			_, addr, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			mu.Lock()
			if p := addr.(*net.UDPAddr).Port; !slices.Contains(ports, p) {
				ports = append(ports, p)
			}
			mu.Unlock()
			_, _ = conn.WriteTo([]byte(fmt.Sprintf("server=loop client=%s\n", addr)), addr)
		}
	}()
	first := 40000 + int(time.Now().UnixNano()%10000)
	res, err := UDPFlows(context.Background(), conn.LocalAddr().String(), 5, first, 2*time.Second)
	if err != nil || res.Replies != 5 || res.SeenSources != 5 {
		t.Fatalf("UDPFlows = %+v, %v; want 5 replies from 5 sources", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(ports)
	if want := []int{first, first + 1, first + 2, first + 3, first + 4}; !slices.Equal(ports, want) {
		t.Errorf("the server saw source ports %v, want %v", ports, want)
	}
}
