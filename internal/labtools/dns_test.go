package labtools

import (
	"context"
	"net"
	"net/netip"
	"testing"
)

func TestDNSServeAndQuery(t *testing.T) {
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	want := netip.MustParseAddr("10.96.7.7")
	go func() { _ = serveDNS(ctx, l, want) }()
	got, err := QueryDNS(ctx, l.LocalAddr().String(), "web.lab", testWait)
	if err != nil || len(got) != 1 || got[0] != want {
		t.Errorf("QueryDNS = %v, %v; want [%v]", got, err, want)
	}
}
