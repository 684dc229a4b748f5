package labtools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"
)

// bigUDPMagic starts a BigUDP request; `lab serve` answers it with a reply of the
// asked size instead of its one-line answer.
const bigUDPMagic = "myelin-big-udp"

// bigUDPMax bounds both directions: one IPv4 datagram.
const bigUDPMax = 65000

// BigUDPResult is what BigUDP observed.
type BigUDPResult struct {
	Sent     int `json:"sent"`     // bytes of the request datagram
	Received int `json:"received"` // bytes of the reply datagram, 0 if none came
	// RequestIntact: the server got the request whole (its length and SHA-256 match).
	RequestIntact bool `json:"requestIntact"`
	// ReplyIntact: the reply has the asked length and its filler is unchanged.
	ReplyIntact bool   `json:"replyIntact"`
	Server      string `json:"server"`
	// Refused: ICMP port unreachable (ECONNREFUSED) came back instead of a reply.
	Refused bool `json:"refused"`
}

// bigFill fills b with the filler both ends expect at absolute offset off onwards.
func bigFill(b []byte, off int) {
	for i := range b {
		b[i] = 'a' + byte((off+i)%26)
	}
}

// BigUDP sends one datagram of send bytes over a connected UDP socket to a `lab serve`
// UDP endpoint, asking for a reply of reply bytes, and checks that both arrived whole.
// Datagrams larger than the path MTU travel as IPv4 fragments, so this checks that
// fragments get through (and through Service translation). Retried twice without a
// reply, as a UDP client would.
func BigUDP(ctx context.Context, target string, send, reply int, timeout time.Duration) (BigUDPResult, error) {
	res := BigUDPResult{Sent: send}
	head := fmt.Sprintf("%s reply=%d\n", bigUDPMagic, reply)
	if send < len(head) || send > bigUDPMax || reply < 1 || reply > bigUDPMax {
		return res, fmt.Errorf("big UDP request of %d bytes with a reply of %d: both must be between %d and %d bytes", send, reply, len(head), bigUDPMax)
	}
	if reply > bigUDPAmplification*send {
		return res, fmt.Errorf("big UDP request of %d bytes with a reply of %d: the reply may be at most %d times the request (servers refuse to amplify)",
			send, reply, bigUDPAmplification)
	}
	req := make([]byte, send)
	copy(req, head)
	bigFill(req[len(head):], len(head))
	sum := sha256.Sum256(req)
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", target)
	if err != nil {
		return res, fmt.Errorf("dial %s: %w", target, err)
	}
	defer c.Close()
	buf := make([]byte, bigUDPMax+1)
	deadline := time.Now().Add(timeout)
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		if _, err := c.Write(req); err != nil {
			return res, fmt.Errorf("send %d bytes to %s: %w", send, target, err)
		}
		wait := time.Now().Add(timeout / 3)
		if wait.After(deadline) {
			wait = deadline
		}
		_ = c.SetReadDeadline(wait)
		n, err := c.Read(buf)
		if errors.Is(err, syscall.ECONNREFUSED) {
			res.Refused = true
			return res, nil
		}
		if err != nil {
			continue
		}
		checkBigReply(&res, buf[:n], reply, hex.EncodeToString(sum[:]))
		return res, nil
	}
	return res, ctx.Err()
}

// checkBigReply fills res from the reply b: "server=NAME client=ADDR len=N sha=HEX\n" and the filler.
func checkBigReply(res *BigUDPResult, b []byte, want int, sha string) {
	res.Received = len(b)
	line, _, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return
	}
	fields := map[string]string{}
	for _, f := range strings.Fields(string(line)) {
		if k, v, ok := strings.Cut(f, "="); ok {
			fields[k] = v
		}
	}
	res.Server = fields["server"]
	res.RequestIntact = fields["len"] == fmt.Sprint(res.Sent) && fields["sha"] == sha
	fill := make([]byte, len(b)-len(line)-1)
	bigFill(fill, len(line)+1)
	res.ReplyIntact = len(b) == want && bytes.Equal(b[len(line)+1:], fill)
}

// bigUDPAmplification bounds a BigUDP reply to this many times its request: a
// server on a node's host network (connectivity test's host pod) must not answer a
// small forged datagram with 65,000 bytes to its spoofed source.
const bigUDPAmplification = 2

// bigUDPAnswer is the server's reply to a BigUDP request req from addr, or nil when
// req is not one or asks for more than bigUDPAmplification times its own size.
func bigUDPAnswer(req []byte, name string, addr net.Addr) []byte {
	if !bytes.HasPrefix(req, []byte(bigUDPMagic+" ")) {
		return nil
	}
	var size int
	line, _, _ := bytes.Cut(req, []byte("\n"))
	if _, err := fmt.Sscanf(string(line), bigUDPMagic+" reply=%d", &size); err != nil || size < 1 || size > bigUDPMax ||
		size > bigUDPAmplification*len(req) {
		return nil
	}
	sum := sha256.Sum256(req)
	head := fmt.Sprintf("server=%s client=%s len=%d sha=%s\n", name, addr, len(req), hex.EncodeToString(sum[:]))
	out := make([]byte, max(size, len(head)))
	copy(out, head)
	bigFill(out[len(head):], len(head))
	return out
}
