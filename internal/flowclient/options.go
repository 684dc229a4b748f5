package flowclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/myelin-net/myelin/internal/flow"
)

// Options are the filters of `myelin observe` and of GET /v1/flows (the query
// parameters have the flags' names). Values within one option are ORed, options
// are ANDed. Pod values are "namespace/name" (a name prefix) or a bare name, which
// is in the one --namespace given, else in "default".
type Options struct {
	Pods       []string // either side
	FromPods   []string
	ToPods     []string
	Namespaces []string // either side, when no --pod is given
	Verdicts   []string
	Protocols  []string
	ToServices []string
	Types      []string
	Ports      []string
	Nodes      []string
}

// Request builds the flow.Request the options ask for, or an error naming the
// malformed filter (flow.Request.Validate's limits included).
func (o Options) Request(last int, follow bool) (flow.Request, error) {
	if last < 0 {
		return flow.Request{}, fmt.Errorf("--last %d: must be 0 or more", last)
	}
	var base flow.Filter
	var err error
	ns := ""
	if len(o.Namespaces) == 1 {
		ns = o.Namespaces[0]
	}
	if base.SourcePod, err = pods("from-pod", o.FromPods, ns); err != nil {
		return flow.Request{}, err
	}
	if base.DestinationPod, err = pods("to-pod", o.ToPods, ns); err != nil {
		return flow.Request{}, err
	}
	if err := o.fillCommon(&base); err != nil {
		return flow.Request{}, err
	}
	either, err := pods("pod", o.Pods, ns)
	if err != nil {
		return flow.Request{}, err
	}
	if len(either) == 0 {
		for _, n := range o.Namespaces {
			if n == "" || strings.Contains(n, "/") {
				return flow.Request{}, fmt.Errorf("--namespace %q: give a namespace name", n)
			}
			either = append(either, n+"/")
		}
	}
	req := flow.Request{Last: last, Follow: follow}
	if len(either) == 0 {
		req.Whitelist = []flow.Filter{base}
	} else {
		src, dst := base, base // --pod: the pod on either side, each with the other filters
		src.SourcePod, dst.DestinationPod = append(src.SourcePod, either...), append(dst.DestinationPod, either...)
		req.Whitelist = []flow.Filter{src, dst}
	}
	if err := req.Validate(); err != nil {
		return flow.Request{}, err
	}
	return req, nil
}

func (o Options) fillCommon(f *flow.Filter) error {
	for _, v := range o.Verdicts {
		u := flow.Verdict(strings.ToUpper(v))
		if u != flow.Forwarded && u != flow.Dropped && u != flow.Traced {
			return fmt.Errorf("--verdict %q: use FORWARDED, DROPPED or TRACED", v)
		}
		f.Verdict = append(f.Verdict, u)
	}
	for _, p := range o.Protocols {
		if !validProtocol(p) {
			return fmt.Errorf("--protocol %q: use tcp, udp, icmp, sctp or an IP protocol number", p)
		}
		f.Protocol = append(f.Protocol, p)
	}
	for _, t := range o.Types {
		u := flow.Type(strings.ToUpper(strings.ReplaceAll(t, "-", "_")))
		switch u {
		case flow.TypeL3L4, flow.TypeDrop, flow.TypePolicyVerdict, flow.TypeTrace, flow.TypeDNS:
		default:
			return fmt.Errorf("--type %q: use l3_l4, drop, policy_verdict, trace or dns", t)
		}
		f.Type = append(f.Type, u)
	}
	for _, p := range o.Ports {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return fmt.Errorf("--port %q: must be a port number (1-65535)", p)
		}
		f.Port = append(f.Port, uint16(n))
	}
	for _, s := range o.ToServices {
		if s == "" || strings.Count(s, "/") > 1 {
			return fmt.Errorf("--to-service %q: use namespace/name (or a name in default)", s)
		}
		if !strings.Contains(s, "/") {
			s = "default/" + s
		}
		f.DestinationService = append(f.DestinationService, s)
	}
	for _, n := range o.Nodes {
		if n == "" {
			return fmt.Errorf("--node \"\": give a node name")
		}
	}
	f.Node = o.Nodes
	return nil
}

func validProtocol(p string) bool {
	switch strings.ToLower(p) {
	case "tcp", "udp", "icmp", "sctp":
		return true
	}
	_, err := strconv.ParseUint(p, 10, 8)
	return err == nil
}

// pods normalises pod filter values; ns is the namespace of bare names ("" = default).
func pods(flag string, vals []string, ns string) ([]string, error) {
	if ns == "" {
		ns = "default"
	}
	var out []string
	for _, v := range vals {
		switch strings.Count(v, "/") {
		case 0:
			if v == "" {
				return nil, fmt.Errorf("--%s \"\": give [namespace/]pod", flag)
			}
			out = append(out, ns+"/"+v)
		case 1:
			if strings.HasPrefix(v, "/") {
				return nil, fmt.Errorf("--%s %q: the namespace is empty; use namespace/pod", flag, v)
			}
			out = append(out, v)
		default:
			return nil, fmt.Errorf("--%s %q: use [namespace/]pod", flag, v)
		}
	}
	return out, nil
}

// Query encodes req for GET /v1/flows.
func Query(req flow.Request) (url.Values, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode flow request: %w", err)
	}
	return url.Values{"request": {string(b)}}, nil
}

// queryOptions maps the query parameters to Options fields.
func queryOptions(q url.Values) Options {
	return Options{Pods: q["pod"], FromPods: q["from-pod"], ToPods: q["to-pod"], Namespaces: q["namespace"],
		Verdicts: q["verdict"], Protocols: q["protocol"], ToServices: q["to-service"], Types: q["type"],
		Ports: q["port"], Nodes: q["node"]}
}

// ParseQuery reads GET /v1/flows's query: "request" (a JSON flow.Request, what
// clients send), or the observe filters by their flag names with last, follow and
// since (RFC 3339), e.g. ?verdict=dropped&namespace=x&last=20. The filters are
// parsed (IPs) and checked against flow's limits here, once: the error names the
// malformed or oversized one.
func ParseQuery(q url.Values) (flow.Request, error) {
	if r := q.Get("request"); r != "" {
		var req flow.Request
		if err := json.Unmarshal([]byte(r), &req); err != nil {
			if errors.Is(err, flow.ErrInvalidFilter) {
				return flow.Request{}, fmt.Errorf("request: %w", err)
			}
			return flow.Request{}, fmt.Errorf("request %s: not a JSON flow request: %w", flow.QuoteValue(r), err)
		}
		if err := req.Validate(); err != nil {
			return flow.Request{}, fmt.Errorf("request: %w", err)
		}
		return req, nil
	}
	last := 0
	if v := q.Get("last"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return flow.Request{}, fmt.Errorf("last %q: must be a number of flows", v)
		}
		last = n
	}
	follow := q.Get("follow") == "true" || q.Get("follow") == "1"
	req, err := queryOptions(q).Request(last, follow)
	if err != nil {
		return flow.Request{}, err
	}
	if v := q.Get("since"); v != "" {
		if req.Since, err = time.Parse(time.RFC3339, v); err != nil {
			return flow.Request{}, fmt.Errorf("since %q: use RFC 3339, e.g. 2026-11-23T15:04:05Z", v)
		}
	}
	return req, nil
}
