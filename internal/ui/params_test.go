package ui

import (
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/flow"
)

func TestParseParams(t *testing.T) {
	good := []struct {
		query string
		want  Params
	}{
		{"", Params{Keep: DefaultKeep, Window: DefaultWindow}},
		{"keep=50&window=30s", Params{Keep: 50, Window: 30 * time.Second}},
		{"namespace=shop&namespace=db,shop", Params{Keep: DefaultKeep, Window: DefaultWindow, Namespaces: []string{"shop", "db"}}},
	}
	for _, c := range good {
		q, _ := url.ParseQuery(c.query)
		got, err := ParseParams(q)
		if err != nil {
			t.Errorf("ParseParams(%q): %v", c.query, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseParams(%q) = %+v, want %+v", c.query, got, c.want)
		}
	}
	bad := []struct{ query, says string }{
		{"keep=abc", `keep="abc": use a number of flows from 1 to 10000`},
		{"keep=0", `keep="0"`},
		{"keep=10001", `keep="10001"`},
		{"keep=1&keep=2", `"keep" is given 2 times`},
		{"window=5", `window="5": use a duration from 1s to 24h0m0s`},
		{"window=-1m", `window="-1m"`},
		{"namespace=Shop", `namespace="Shop": "Shop" is not a namespace name`},
		{"namespace=a,,b", `"" is not a namespace name`},
		{"verdict=DROPPED", `query parameter "verdict" is not known: use keep, window or namespace`},
	}
	for _, c := range bad {
		q, _ := url.ParseQuery(c.query)
		_, err := ParseParams(q)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ParseParams(%q) = %v, want an error saying %q", c.query, err, c.says)
		}
	}
}

func TestParamsRequest(t *testing.T) {
	got := Params{Keep: 7, Namespaces: []string{"shop", "db"}}.Request()
	want := flow.Request{Last: 7, Follow: true, Whitelist: []flow.Filter{
		{SourcePod: []string{"shop/", "db/"}}, {DestinationPod: []string{"shop/", "db/"}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Request = %+v, want %+v", got, want)
	}
	// Many namespaces stay a valid request (two filters, not two per namespace).
	many := Params{Keep: 7}
	for i := range 20 {
		many.Namespaces = append(many.Namespaces, fmt.Sprintf("ns-%d", i))
	}
	if err := many.Request().Validate(); err != nil {
		t.Errorf("Request with %d namespaces: %v", len(many.Namespaces), err)
	}
	if all := (Params{Keep: 3}).Request(); all.Whitelist != nil {
		t.Errorf("Request without namespaces has a whitelist %+v: want every flow", all.Whitelist)
	}
}
