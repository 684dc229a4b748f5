package connlimit

import (
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// listen wraps a loopback listener and accepts into a channel.
func listen(t *testing.T, b *Bound) (*Listener, <-chan net.Conn) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := b.Wrap(raw, "test", nil)
	t.Cleanup(func() { l.Close() })
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	return l, accepted
}

// dial connects from the loopback address from (Linux routes all of 127/8 to lo).
func dial(t *testing.T, from string, to net.Addr) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", to.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer says whether the server ended c without a byte (a refused
// connection), waiting until it does; a kept connection must answer ping.
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Read(make([]byte, 1))
	if err == nil {
		t.Fatal("the server wrote to a connection")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return true
}

func TestPerSourceBound(t *testing.T) {
	b := New(2, 10)
	l, accepted := listen(t, b)
	dial(t, "127.0.0.1", l.Addr())
	dial(t, "127.0.0.1", l.Addr())
	s1, _ := <-accepted, <-accepted
	over := dial(t, "127.0.0.1", l.Addr())
	if !closedByServer(t, over) {
		t.Fatal("a third connection from 127.0.0.1 was kept open, want it closed (2 per source)")
	}
	if b.Refused() != 1 {
		t.Errorf("Refused = %d, want 1", b.Refused())
	}
	// Another source is served while the first holds its bound.
	other := dial(t, "127.0.0.2", l.Addr())
	s3 := <-accepted
	if _, err := s3.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(other, make([]byte, 1)); err != nil {
		t.Fatalf("the connection from 127.0.0.2: %v, want it served", err)
	}
	// A closed connection gives its slot back, once, however often it is closed.
	s1.Close()
	s1.Close()
	dial(t, "127.0.0.1", l.Addr())
	s4 := <-accepted
	if got := sourceOf(s4).String(); got != "127.0.0.1" {
		t.Errorf("accepted a connection from %s, want 127.0.0.1", got)
	}
	over2 := dial(t, "127.0.0.1", l.Addr())
	if !closedByServer(t, over2) {
		t.Fatal("a connection over the bound after one was freed was kept open")
	}
}

func TestTotalBound(t *testing.T) {
	b := New(5, 2)
	l, accepted := listen(t, b)
	dial(t, "127.0.0.1", l.Addr())
	dial(t, "127.0.0.2", l.Addr())
	s1, _ := <-accepted, <-accepted
	if !closedByServer(t, dial(t, "127.0.0.3", l.Addr())) {
		t.Fatal("a third connection was kept open, want it closed (2 in all)")
	}
	s1.Close()
	dial(t, "127.0.0.3", l.Addr())
	if got := sourceOf(<-accepted).String(); got != "127.0.0.3" {
		t.Errorf("accepted %s, want 127.0.0.3 once a slot was free", got)
	}
}

// An HTTP server on a bounded listener keeps answering a second source while one
// source holds every connection it may have, idle (the attack: a pod opening
// connections to a node's metrics port and never sending a request).
func TestHTTPServedUnderFlood(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := New(8, 100)
	l := b.Wrap(raw, "test", nil)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }),
		ReadHeaderTimeout: time.Minute}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	for i := 0; i < 50; i++ {
		dial(t, "127.0.0.1", l.Addr())
	}
	client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	resp, err := client.Get("http://" + l.Addr().String() + "/")
	if err != nil {
		t.Fatalf("GET from a second source while the first floods: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Errorf("body %q, want ok", body)
	}
	if b.Refused() == 0 {
		t.Errorf("Refused = 0 after 50 connections from one source with a bound of 8")
	}
}

// An IPv6 source counts per /64: a host rotating addresses in its /64 is one source.
func TestIPv6SourcePer64(t *testing.T) {
	for _, c := range []struct{ remote, want string }{
		{"[2001:db8:1:2:aaaa::1]:80", "2001:db8:1:2::"},
		{"[2001:db8:1:2:bbbb::7%eth0]:80", "2001:db8:1:2::"},
		{"[::ffff:10.0.0.1]:80", "10.0.0.1"},
		{"10.0.0.1:80", "10.0.0.1"},
	} {
		if got := sourceOf(fakeConn{remote: c.remote}); got.String() != c.want {
			t.Errorf("source of %s = %s, want %s", c.remote, got, c.want)
		}
	}
}

type fakeConn struct {
	net.Conn
	remote string
}

func (c fakeConn) RemoteAddr() net.Addr { return addrString(c.remote) }

type addrString string

func (a addrString) Network() string { return "tcp" }
func (a addrString) String() string  { return string(a) }

// Take bounds what requests hold (streams) per source and in all, like connections;
// a released slot is free again, and releasing twice frees it once.
func TestTake(t *testing.T) {
	b := New(2, 3)
	r1, ok1 := b.Take("10.0.0.1:40000")
	_, ok2 := b.Take("10.0.0.1:40001")
	if !ok1 || !ok2 {
		t.Fatal("the first two streams of a source were refused")
	}
	if _, ok := b.Take("10.0.0.1:40002"); ok {
		t.Error("a third stream of a source with a bound of 2 was taken")
	}
	if _, ok := b.Take("[2001:db8:1::1]:40000"); !ok {
		t.Error("another source's first stream was refused")
	}
	if _, ok := b.Take("[2001:db8:2::1]:40000"); ok {
		t.Error("a stream over the total bound of 3 was taken")
	}
	r1()
	r1()
	if _, ok := b.Take("[2001:db8:2::1]:40000"); !ok {
		t.Error("a stream after one was released was refused")
	}
	if _, ok := b.Take("10.0.0.9:40000"); ok {
		t.Error("releasing a slot twice freed two")
	}
	if b.Refused() != 3 {
		t.Errorf("refused %d, want 3", b.Refused())
	}
}
