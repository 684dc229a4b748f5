package ui

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/myelin-net/myelin/internal/flow"
)

// Limits of the page's query parameters.
const (
	DefaultKeep   = 1000            // flows a page keeps (table rows, graph input)
	MaxKeep       = 10000           // the most a page may ask for
	DefaultWindow = 5 * time.Minute // the graph draws flows this recent
	MaxWindow     = 24 * time.Hour
)

// Params are the page's query parameters, the same on the page (/) and its stream
// (api/flows): keep=N, window=DURATION, namespace=NS (repeatable).
type Params struct {
	Keep       int
	Window     time.Duration
	Namespaces []string
}

var namespaceRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ParseParams validates a page's query. An unknown, repeated or malformed parameter
// is an error that names it, says what is wrong and what is allowed.
func ParseParams(q url.Values) (Params, error) {
	p := Params{Keep: DefaultKeep, Window: DefaultWindow}
	for name, vals := range q {
		if name != "namespace" && len(vals) > 1 {
			return p, fmt.Errorf("query parameter %q is given %d times: give it once", name, len(vals))
		}
		var err error
		switch name {
		case "keep":
			p.Keep, err = parseKeep(vals[0])
		case "window":
			p.Window, err = parseWindow(vals[0])
		case "namespace":
			p.Namespaces, err = parseNamespaces(vals)
		default:
			err = fmt.Errorf("query parameter %q is not known: use keep, window or namespace", name)
		}
		if err != nil {
			return p, err
		}
	}
	return p, nil
}

func parseKeep(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxKeep {
		return 0, fmt.Errorf("query parameter keep=%q: use a number of flows from 1 to %d (default %d)", v, MaxKeep, DefaultKeep)
	}
	return n, nil
}

func parseWindow(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Second || d > MaxWindow {
		return 0, fmt.Errorf("query parameter window=%q: use a duration from 1s to %s such as 30s, 5m or 1h (default %s)", v, MaxWindow, DefaultWindow)
	}
	return d, nil
}

func parseNamespaces(vals []string) ([]string, error) {
	var out []string
	for _, v := range vals {
		for ns := range strings.SplitSeq(v, ",") {
			if !namespaceRE.MatchString(ns) || len(ns) > 63 {
				return nil, fmt.Errorf("query parameter namespace=%q: %q is not a namespace name (lowercase letters, digits and '-', at most 63)", v, ns)
			}
			if !slices.Contains(out, ns) {
				out = append(out, ns)
			}
		}
	}
	return out, nil
}

// Request is what the page's stream asks of the Source: the newest Keep flows, then
// new ones, where either side is in one of the namespaces (all when none).
// Two filters whatever the number of namespaces (the values of one field are
// ORed): a filter per namespace and side passed flow.MaxFilters at 9 namespaces.
func (p Params) Request() flow.Request {
	req := flow.Request{Last: p.Keep, Follow: true}
	if len(p.Namespaces) == 0 {
		return req
	}
	pods := make([]string, 0, len(p.Namespaces))
	for _, ns := range p.Namespaces {
		pods = append(pods, ns+"/")
	}
	req.Whitelist = []flow.Filter{{SourcePod: pods}, {DestinationPod: pods}}
	return req
}
