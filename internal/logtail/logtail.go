// Package logtail cuts the end off a log or a tool's output, for error messages that
// show what a failed process said last.
package logtail

import (
	"os"
	"strings"
)

// Lines returns the last n non-empty lines of s, trimmed, oldest first.
func Lines(s string, n int) []string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

// Last returns the last non-empty line of s, "" if there is none.
func Last(s string) string {
	if l := Lines(s, 1); len(l) == 1 {
		return l[0]
	}
	return ""
}

// File returns the last non-empty line of the file at path, "" if it has none or
// cannot be read.
func File(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return Last(string(b))
}
