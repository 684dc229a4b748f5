package cli

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/myelin-net/myelin/internal/flow"
)

// A pod chooses the names it queries; an agent that stored one raw (older, or
// through a path that does not escape) must still not reach the operator's terminal
// with escape sequences or forged rows.
func TestFormatFlowNoControlChars(t *testing.T) {
	evil := "x\x1b[2J\r\nforged row\xff."
	pod := flow.Endpoint{IP: "10.244.0.7", Namespace: "x", Pod: "client"}
	cases := []struct {
		name string
		f    flow.Flow
		want string // what the row shows of the evil text
	}{
		{"dns query", flow.Flow{Type: flow.TypeDNS, Verdict: flow.Forwarded, Source: pod, Protocol: "UDP",
			DNS: &flow.DNS{Query: evil, QType: "A"}}, `"x\x1b[2J\r\nforged row\xff."`},
		{"dns response", flow.Flow{Type: flow.TypeDNS, Verdict: flow.Forwarded, Destination: pod, Protocol: "UDP",
			DNS: &flow.DNS{Query: evil, QType: "A", Response: true, RCode: "NOERROR", IPs: []string{"10.96.0.10"}}}, `"x\x1b[2J\r\nforged row\xff."`},
		{"node, pod and service", flow.Flow{Node: evil, Type: flow.TypeL3L4, Verdict: flow.Forwarded,
			Source: flow.Endpoint{Namespace: "x", Pod: evil}, Protocol: "TCP", Service: evil}, `"x/x\x1b[2J\r\nforged row\xff."`},
		{"lost", flow.Flow{Node: evil, Type: flow.TypeLost, Lost: 1}, `"x\x1b[2J\r\nforged row\xff."`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.f.Time = time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)
			row := FormatFlow(&c.f)
			if strings.ContainsAny(row, "\x1b\r\n") || !utf8.ValidString(row) {
				t.Errorf("FormatFlow = %q: has ESC, CR, LF or a byte that is not UTF-8", row)
			}
			if !strings.Contains(row, c.want) {
				t.Errorf("FormatFlow = %q, want it to show %s", row, c.want)
			}
		})
	}
}

func TestFormatFlowEscapedDNSName(t *testing.T) {
	f := flow.Flow{Type: flow.TypeDNS, Verdict: flow.Forwarded, Protocol: "UDP",
		DNS: &flow.DNS{Query: `evil\255.com.`, QType: "A"}}
	if row := FormatFlow(&f); !strings.Contains(row, `DNS query evil\255.com. A`) {
		t.Errorf("FormatFlow = %q: want the escaped name as it is, unquoted", row)
	}
}
