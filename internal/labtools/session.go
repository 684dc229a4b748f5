package labtools

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// SessionResult is what HTTPSession observed on its one connection.
type SessionResult struct {
	LocalAddr string `json:"localAddr"`
	Requests  int    `json:"requests"`
	Answered  int    `json:"answered"`
	// Answers are the distinct answers ("server=NAME client=IP").
	Answers []string `json:"answers"`
	Error   string   `json:"error,omitempty"`
}

// SessionMax bounds a session of n = 0 (until ctx ends): a load generator stops by itself.
const SessionMax = 10 * time.Minute

// HTTPSession opens one TCP connection to target (a `lab serve` endpoint),
// from localPort when not 0, and sends n HTTP requests over it, interval
// apart, reading each answer: the check that a connection carries data
// throughout (a reset or a stolen connection ends it with an error). With n = 0
// it sends until ctx ends (at most SessionMax), then reports what it sent.
func HTTPSession(ctx context.Context, target string, localPort, n int, interval time.Duration) SessionResult {
	res := SessionResult{Requests: n}
	if n == 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, SessionMax)
		defer cancel()
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	if localPort != 0 {
		d.LocalAddr = &net.TCPAddr{Port: localPort}
	}
	conn, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		res.Error = fmt.Sprintf("connect to %s: %v", target, err)
		return res
	}
	defer conn.Close()
	res.LocalAddr = conn.LocalAddr().String()
	r := bufio.NewReader(conn)
	seen := map[string]bool{}
	for i := 0; n == 0 || i < n; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
		if n == 0 {
			if ctx.Err() != nil {
				break
			}
			res.Requests++
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", target); err != nil {
			res.Error = fmt.Sprintf("request %d: %v", i+1, err)
			return res
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			res.Error = fmt.Sprintf("answer %d: %v", i+1, err)
			return res
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			res.Error = fmt.Sprintf("answer %d: %v", i+1, err)
			return res
		}
		res.Answered++
		if a := strings.TrimSpace(string(body)); !seen[a] {
			seen[a] = true
			res.Answers = append(res.Answers, a)
		}
	}
	return res
}
