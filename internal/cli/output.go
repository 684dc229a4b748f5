package cli

import (
	"encoding/json"
	"io"
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
