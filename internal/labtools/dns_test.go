package labtools

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"
)

func TestDNSServeAndQuery(t *testing.T) {
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.LocalAddr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	want := netip.MustParseAddr("10.96.7.7")
	go func() { _ = ServeDNS(ctx, addr, want) }()
	var got []netip.Addr
	for i := 0; i < 50; i++ { // the server may not listen yet
		if got, err = QueryDNS(ctx, addr, "web.lab", 100*time.Millisecond); err == nil {
			break
		}
	}
	if err != nil || len(got) != 1 || got[0] != want {
		t.Errorf("QueryDNS = %v, %v; want [%v]", got, err, want)
	}
}
