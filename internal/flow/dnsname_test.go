package flow

import (
	"testing"
	"unicode/utf8"
)

func TestPresentName(t *testing.T) {
	cases := []struct {
		name   string
		labels []string
		want   string
	}{
		{"plain name", []string{"web", "x", "svc", "cluster", "local"}, "web.x.svc.cluster.local."},
		{"byte that is not UTF-8", []string{"evil\xff", "com"}, `evil\255.com.`},
		{"UTF-8 bytes", []string{"caf\xc3\xa9", "com"}, `caf\195\169.com.`},
		{"ESC, CR and LF", []string{"a\x1b[2Jb\r\nc"}, `a\027[2Jb\013\010c.`},
		{"NUL, space and DEL", []string{"\x00 \x7f"}, `\000\032\127.`},
		{"dot and backslash inside a label", []string{"a.b", `c\d`, "e"}, `a\.b.c\\d.e.`},
		{"other visible ASCII", []string{"_srv-1", "*!~"}, "_srv-1.*!~."},
		{"root", nil, "."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var labels [][]byte
			for _, l := range c.labels {
				labels = append(labels, []byte(l))
			}
			if got := presentName(labels); got != c.want {
				t.Errorf("presentName(%q) = %q, want %q", c.labels, got, c.want)
			}
		})
	}
}

func TestParseDNSEscapesQuery(t *testing.T) {
	cases := []struct{ name, want string }{
		{"web.x.svc.cluster.local.", "web.x.svc.cluster.local."},
		{"evil\xff.com.", `evil\255.com.`},
		{"a\x1b[31m\r\nforged.example.", `a\027[31m\013\010forged.example.`},
		{`back\slash.example.`, `back\\slash.example.`},
		{".", "."},
	}
	for _, c := range cases {
		d, err := ParseDNS(dnsPacket(t, c.name, false, 0))
		if err != nil {
			t.Fatalf("ParseDNS(query for %q): %v", c.name, err)
		}
		if d.Query != c.want || !utf8.ValidString(d.Query) {
			t.Errorf("ParseDNS(query for %q).Query = %q, want %q", c.name, d.Query, c.want)
		}
	}
}
