package flowclient

import (
	"errors"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/flow"
)

func TestOptionsRequest(t *testing.T) {
	req, err := Options{Pods: []string{"web"}, Namespaces: []string{"x"}, Verdicts: []string{"dropped"},
		Protocols: []string{"TCP"}, Ports: []string{"80"}, ToServices: []string{"y/web"}}.Request(5, true)
	if err != nil {
		t.Fatal(err)
	}
	common := flow.Filter{Verdict: []flow.Verdict{flow.Dropped}, Protocol: []string{"TCP"}, Port: []uint16{80}, DestinationService: []string{"y/web"}}
	src, dst := common, common
	src.SourcePod, dst.DestinationPod = []string{"x/web"}, []string{"x/web"}
	want := flow.Request{Whitelist: []flow.Filter{src, dst}, Last: 5, Follow: true}
	if !reflect.DeepEqual(req, want) {
		t.Errorf("Request =\n %+v\nwant\n %+v", req, want)
	}
	req, err = Options{Namespaces: []string{"a", "b"}, FromPods: []string{"c/d"}}.Request(0, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Whitelist) != 2 || !reflect.DeepEqual(req.Whitelist[0].SourcePod, []string{"c/d", "a/", "b/"}) ||
		!reflect.DeepEqual(req.Whitelist[1].DestinationPod, []string{"a/", "b/"}) {
		t.Errorf("namespaces: %+v", req.Whitelist)
	}
}

func TestOptionsRequestErrorsNameTheFilter(t *testing.T) {
	cases := []struct {
		o    Options
		last int
		want string
	}{
		{Options{Verdicts: []string{"ALLOWED"}}, 0, `--verdict "ALLOWED"`},
		{Options{Protocols: []string{"quic"}}, 0, `--protocol "quic"`},
		{Options{Ports: []string{"http"}}, 0, `--port "http"`},
		{Options{Ports: []string{"70000"}}, 0, `--port "70000"`},
		{Options{Types: []string{"l7"}}, 0, `--type "l7"`},
		{Options{Pods: []string{"a/b/c"}}, 0, `--pod "a/b/c"`},
		{Options{FromPods: []string{"/x"}}, 0, `--from-pod "/x"`},
		{Options{ToServices: []string{"a/b/c"}}, 0, `--to-service "a/b/c"`},
		{Options{Namespaces: []string{"a/b"}}, 0, `--namespace "a/b"`},
		{Options{}, -1, `--last -1`},
	}
	for _, c := range cases {
		_, err := c.o.Request(c.last, false)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want it to name %s", c.o, err, c.want)
		}
	}
}

func TestParseQuery(t *testing.T) {
	req := flow.Request{Whitelist: []flow.Filter{{Protocol: []string{"udp"}, Port: []uint16{53}}}, Last: 3}
	q, err := Query(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseQuery(q)
	if err != nil || !reflect.DeepEqual(got, req) {
		t.Errorf("ParseQuery(Query(req)) = %+v, %v; want %+v", got, err, req)
	}
	got, err = ParseQuery(url.Values{"verdict": {"DROPPED"}, "last": {"7"}, "follow": {"true"}})
	if err != nil || got.Last != 7 || !got.Follow || got.Whitelist[0].Verdict[0] != flow.Dropped {
		t.Errorf("flag-style query: %+v, %v", got, err)
	}
	for _, bad := range []url.Values{{"request": {"{"}}, {"last": {"x"}}, {"since": {"yesterday"}}, {"port": {"x"}}} {
		if _, err := ParseQuery(bad); err == nil {
			t.Errorf("ParseQuery(%v): no error", bad)
		}
	}
}

// A JSON request's IP filters are parsed and its filters bounded when the query is
// read: a malformed or oversized one is an error (a 400) naming the field.
func TestParseQueryFilters(t *testing.T) {
	cidr := `{"Whitelist":[{"sourceIP":["10.244.0.0/16"]}]}`
	got, err := ParseQuery(url.Values{"request": {cidr}})
	if err != nil || len(got.Whitelist) != 1 || got.Whitelist[0].SourceIP[0] != netip.MustParsePrefix("10.244.0.0/16") {
		t.Errorf("ParseQuery(%s) = %+v, %v", cidr, got, err)
	}
	cases := []struct{ request, want string }{
		{`{"Whitelist":[{"sourceIP":["web-1"]}]}`, `sourceIP "web-1"`},
		{`{"Blacklist":[{"destinationIP":["` + strings.Repeat("1", 3<<20) + `"]}]}`, "destinationIP"},
		{`{"Whitelist":[{"node":["` + strings.Repeat("n", flow.MaxFilterValueLen+1) + `"]}]}`, "whitelist filter 0: node"},
	}
	for _, c := range cases {
		_, err := ParseQuery(url.Values{"request": {c.request}})
		if !errors.Is(err, flow.ErrInvalidFilter) || !strings.Contains(err.Error(), c.want) || len(err.Error()) > 500 {
			t.Errorf("ParseQuery(%.60s…): err %.300v, want a short ErrInvalidFilter naming %s", c.request, err, c.want)
		}
	}
	many := url.Values{"node": slices.Repeat([]string{"n"}, flow.MaxFilterValues)}
	if _, err := ParseQuery(many); !errors.Is(err, flow.ErrInvalidFilter) {
		t.Errorf("ParseQuery with %d nodes: err %v, want ErrInvalidFilter", flow.MaxFilterValues, err)
	}
}
