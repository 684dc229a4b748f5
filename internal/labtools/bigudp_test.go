package labtools

import (
	"context"
	"net"
	"testing"
)

// BigUDP against the lab server's UDP side on loopback: both datagrams whole.
func TestBigUDPLoopback(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go serveUDP(conn, "loop")
	res, err := BigUDP(context.Background(), conn.LocalAddr().String(), 3000, 6000, testWait)
	if err != nil {
		t.Fatal(err)
	}
	want := BigUDPResult{Sent: 3000, Received: 6000, RequestIntact: true, ReplyIntact: true, Server: "loop"}
	if res != want {
		t.Errorf("BigUDP = %+v, want %+v", res, want)
	}
}

// A reply cut short or changed is not intact.
func TestBigUDPReplyCheck(t *testing.T) {
	addr := &net.UDPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1}
	req := make([]byte, 250)
	copy(req, bigUDPMagic+" reply=500\n")
	bigFill(req[len(bigUDPMagic+" reply=500\n"):], len(bigUDPMagic+" reply=500\n"))
	good := bigUDPAnswer(req, "s", addr)
	if len(good) != 500 {
		t.Fatalf("answer of %d bytes, want 500", len(good))
	}
	for name, b := range map[string][]byte{"cut": good[:499], "changed": append(append([]byte(nil), good[:400]...), append([]byte{'!'}, good[401:]...)...)} {
		var res BigUDPResult
		checkBigReply(&res, b, 500, "")
		if res.ReplyIntact {
			t.Errorf("%s reply counted as intact", name)
		}
	}
	if bigUDPAnswer([]byte("hello"), "s", addr) != nil {
		t.Error("a plain datagram got a big answer")
	}
	// A small request asking for a big reply (an amplifier's use) gets none.
	if b := bigUDPAnswer([]byte(bigUDPMagic+" reply=65000\n"), "s", addr); b != nil {
		t.Errorf("a %d-byte request got a %d-byte answer; want none over %d times its size",
			len(bigUDPMagic+" reply=65000\n"), len(b), bigUDPAmplification)
	}
}
