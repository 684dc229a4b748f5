package cli

import (
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"unicode"
)

// printJSON writes v as indented JSON: what every command prints with -o json.
func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// oneOrAll is what -o json shows of the nodes' answers: the one node's answer when
// one node was asked, else the list (with --all, even of one).
func oneOrAll[T any](answers []T, all bool) any {
	if !all && len(answers) == 1 {
		return answers[0]
	}
	return answers
}

// printable is s for a table cell: s itself when every rune is printable, else s
// quoted with Go's escapes (strconv.Quote), so text from outside the agent (a DNS
// name a pod chose, say) can never write a control sequence, a line break or an
// invalid byte to the terminal.
func printable(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return r == unicode.ReplacementChar || !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}
