// Package termtext makes text from outside the CLI (an agent's answer, a pod's DNS
// name, a remote command's output) safe to print on a terminal.
package termtext

import (
	"strconv"
	"strings"
	"unicode"
)

// Printable is s itself when every rune is printable, else s quoted with Go's escapes
// (strconv.Quote), so text from outside can never write a control sequence, a line
// break or an invalid byte to the terminal.
func Printable(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return r == unicode.ReplacementChar || !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}
