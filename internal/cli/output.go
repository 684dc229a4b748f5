package cli

import (
	"encoding/json"
	"io"

	"github.com/myelin-net/myelin/internal/termtext"
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

// printable is s for a table cell, escaped when it holds anything a terminal would
// act on (termtext.Printable): text from outside the CLI (a DNS name a pod chose, an
// agent's error) never writes a control sequence or a line break.
func printable(s string) string { return termtext.Printable(s) }

// escapedError is an agent's error (its message is the agent's text) printed through
// printable; errors.Is still sees the error.
type escapedError struct{ err error }

func (e escapedError) Error() string { return printable(e.err.Error()) }
func (e escapedError) Unwrap() error { return e.err }
