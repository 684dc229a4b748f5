package flow

import (
	"bytes"
	"fmt"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsName presents a name dnsmessage parsed. dnsmessage joins the labels with dots
// and rejects a label that holds a dot itself (golang/go#56246), so every dot in n
// is a label boundary.
func dnsName(n dnsmessage.Name) string {
	s := bytes.TrimSuffix(n.Data[:n.Length], []byte{'.'})
	if len(s) == 0 {
		return presentName(nil)
	}
	return presentName(bytes.Split(s, []byte{'.'}))
}

// presentName writes the fully qualified name with these labels (the root's empty
// label left out) in the zone-file presentation form (RFC 1035 §5.1, RFC 4343 §2.1),
// with its trailing dot: "." for the root. Letters, digits and the other visible
// ASCII characters stay as they are, a dot or a backslash inside a label becomes
// "\." or "\\" so the label boundaries stay unambiguous, and every other byte
// (space, control bytes, 0x7f and above) becomes "\DDD", its value in three decimal
// digits. A pod chooses the names it queries and a label may hold any byte (RFC 2181
// §11); raw, a byte that is not UTF-8 would stop the Hubble server sending the flow
// and a control byte would reach an operator's terminal. Space is escaped too,
// though printable, so a name stays one word in `myelin observe`'s columns.
func presentName(labels [][]byte) string {
	if len(labels) == 0 {
		return "."
	}
	var b strings.Builder
	for _, l := range labels {
		for _, c := range l {
			switch {
			case c == '.' || c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c > ' ' && c < 0x7f:
				b.WriteByte(c)
			default:
				fmt.Fprintf(&b, `\%03d`, c)
			}
		}
		b.WriteByte('.')
	}
	return b.String()
}
