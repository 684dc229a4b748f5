package cli

import (
	"bytes"
	"testing"
)

// TestOneOrAll checks what -o json prints of the nodes' answers: an object for one
// node asked, a list with --all (even of one), and null when no node answered.
func TestOneOrAll(t *testing.T) {
	for _, tt := range []struct {
		name    string
		answers []string
		all     bool
		want    string
	}{
		{"one node", []string{"a"}, false, "\"a\"\n"},
		{"all, one answer", []string{"a"}, true, "[\n  \"a\"\n]\n"},
		{"all", []string{"a", "b"}, true, "[\n  \"a\",\n  \"b\"\n]\n"},
		{"none answered", nil, false, "null\n"},
	} {
		var b bytes.Buffer
		if err := printJSON(&b, oneOrAll(tt.answers, tt.all)); err != nil {
			t.Fatal(err)
		}
		if b.String() != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, b.String(), tt.want)
		}
	}
}
