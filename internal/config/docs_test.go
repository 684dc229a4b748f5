package config

import (
	"os"
	"strings"
	"testing"
)

// TestEveryKeyDocumented keeps the operator's key table true: every key the agent
// accepts has a row in docs/operations.md with its default, and the table names no key
// the agent would refuse.
func TestEveryKeyDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // key → default cell
	_, table, _ := strings.Cut(string(b), "| key | default | values |")
	table, _, _ = strings.Cut(table, "\n\n")
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		rows[name] = strings.TrimSpace(cells[2])
	}
	known := map[string]bool{}
	for _, k := range keys {
		known[k.name] = true
		def, ok := rows[k.name]
		want := "`" + k.def + "`"
		if k.def == "" {
			want = "(none)"
		}
		switch {
		case !ok:
			t.Errorf("key %s is not in the table of docs/operations.md", k.name)
		case def != want:
			t.Errorf("docs/operations.md gives %s the default %s, the agent %s", k.name, def, want)
		}
	}
	for name := range rows {
		if !known[name] {
			t.Errorf("docs/operations.md documents %s, which the agent does not accept", name)
		}
	}
}
