package ui

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// hostCheck guards against DNS rebinding: a web page whose name the attacker re-points
// at 127.0.0.1 reaches the operator's `myelin ui` through the browser, but its requests
// carry the attacker's name in Host (and Origin). Only names this server is meant to be
// reached by pass: loopback names, the listen address, and --allowed-host names.
type hostCheck struct {
	names map[string]bool // lower-case host names, matched on any port
	addrs map[string]bool // lower-case host:port, matched exactly
}

func newHostCheck() *hostCheck {
	c := &hostCheck{names: map[string]bool{}, addrs: map[string]bool{}}
	c.add("localhost", "127.0.0.1", "::1")
	return c
}

// add allows host names ("myelin-ui", any port) or host:port values (that port only).
func (c *hostCheck) add(hosts ...string) {
	for _, h := range hosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if h == "" {
			continue
		}
		if name, port, err := net.SplitHostPort(h); err == nil && port != "" {
			c.addrs[net.JoinHostPort(name, port)] = true
			continue
		}
		c.names[strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")] = true
	}
}

// allowed reports whether a Host header value ("name", "name:port", "[::1]:port") is
// one of the allowed hosts.
func (c *hostCheck) allowed(host string) bool {
	host = strings.ToLower(host)
	if host == "" {
		return false
	}
	if c.addrs[host] {
		return true
	}
	name := host
	if n, _, err := net.SplitHostPort(host); err == nil {
		name = n
	}
	return c.names[strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")]
}

// reject answers 403 to a request whose Host, or whose Origin (when the browser sends
// one), is not an allowed host, and reports whether it did.
func (c *hostCheck) reject(w http.ResponseWriter, r *http.Request) bool {
	if !c.allowed(r.Host) {
		http.Error(w, "myelin ui: host "+quote(r.Host)+" is not allowed: open the page by an allowed name (localhost, 127.0.0.1, [::1], the --listen address) or add the name with --allowed-host", http.StatusForbidden)
		return true
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !c.allowed(u.Host) {
			http.Error(w, "myelin ui: origin "+quote(o)+" is not allowed: only pages served by this server may read it (add its name with --allowed-host)", http.StatusForbidden)
			return true
		}
	}
	return false
}

func quote(s string) string { return "\"" + strings.ReplaceAll(s, "\"", "") + "\"" }
