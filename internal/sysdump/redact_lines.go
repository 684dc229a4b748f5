package sysdump

import (
	"bytes"
	"slices"
)

// Most of a dump's lines (routes, counters, a quiet log) hold nothing Redact
// replaces, and a regexp without a literal prefix costs as much on those as on
// others. So each rule runs only on the lines that hold a word its every match holds,
// with the lines around them that a match may span; the rest is copied.

// secretWords are what every name secretName says yes to holds, ignoring case and
// with its separators in (api_key, client-key, apiKey): "key" only after api,
// private, client, access or certificate or before data (keyHot).
var secretWords = []string{"token", "pass", "pwd", "secret", "key", "credential", "docker", "auth", "cookie"}

// keyBefore and keyAfter are the words "key" makes a secret name with (secretParts),
// before it and after it.
var (
	keyBefore = []string{"api", "private", "client", "access", "certificate"}
	keyAfter  = []string{"data"}
)

// mayNameSecret says whether b may hold a name secretName says yes to.
func mayNameSecret(b []byte) bool {
	return len(hotSpans(b, secretWords, 0, 0)) > 0
}

// onHotLines returns b with f applied to each of its spans made of a line that holds
// one of words (lowercase; b's ASCII case is ignored) and the before lines before it
// and after lines after it; f must return a new slice.
func onHotLines(b []byte, words []string, before, after int, f func([]byte) []byte) []byte {
	spans := hotSpans(b, words, before, after)
	if len(spans) == 0 {
		return b
	}
	out := make([]byte, 0, len(b)+len(b)/16)
	last := 0
	for _, s := range spans {
		out = append(out, b[last:s[0]]...)
		out = append(out, f(b[s[0]:s[1]:s[1]])...)
		last = s[1]
	}
	return append(out, b[last:]...)
}

// hotSpans returns onHotLines' spans, in order and apart.
func hotSpans(b []byte, words []string, before, after int) [][2]int {
	lower := asciiLower(b)
	var spans [][2]int
	for _, w := range words {
		covered := 0 // where the last span closeOpen extended ends
		for i := 0; ; {
			j := bytes.Index(lower[i:], []byte(w))
			if j < 0 {
				break
			}
			at := i + j
			if w == "key" && !keyHot(lower, at) {
				i = at + len(w)
				continue
			}
			start, end := bytes.LastIndexByte(b[:at], '\n')+1, lineAfter(b, at)
			i = end
			for n := 0; n < before && start > 0; n++ {
				start = bytes.LastIndexByte(b[:start-1], '\n') + 1
			}
			for n := 0; n < after && end < len(b); {
				next := lineAfter(b, end)
				if len(bytes.TrimSpace(b[end:next])) > 0 { // blank lines don't count
					n++
				}
				end = next
			}
			if end < covered {
				end = covered // inside a span already closed: scanned once
			} else {
				end = closeOpen(b, start, end)
				covered = end
			}
			spans = append(spans, [2]int{start, end})
		}
	}
	slices.SortFunc(spans, func(x, y [2]int) int { return x[0] - y[0] })
	merged := spans[:0]
	for _, s := range spans {
		if n := len(merged); n > 0 && s[0] <= merged[n-1][1] {
			merged[n-1][1] = max(merged[n-1][1], s[1])
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// maxOpenLines bounds how far closeOpen extends a span.
const maxOpenLines = 256

// closeOpen returns where the span b[start:end] ends once what it opens is closed: a
// JSON list ("tokens": [ with its items on the lines below, as sysdump's own indented
// JSON writes it) up to its ], a quoted value (NAME="line1\nline2...") up to its
// closing quote, at most maxOpenLines lines further. Each byte is scanned once.
func closeOpen(b []byte, start, end int) int {
	var o openScan
	o.scan(b[start:end])
	for n := 0; n < maxOpenLines && end < len(b) && o.open(); n++ {
		next := lineAfter(b, end)
		o.scan(b[end:next])
		end = next
	}
	return end
}

// openScan follows, across the chunks it is given, whether a double quote (not
// escaped) or a [ outside quotes is left open.
type openScan struct {
	quoted, escaped bool
	depth           int
}

func (o *openScan) scan(s []byte) {
	for _, c := range s {
		switch {
		case o.escaped:
			o.escaped = false
		case c == '\\':
			o.escaped = true
		case c == '"':
			o.quoted = !o.quoted
		case o.quoted:
		case c == '[':
			o.depth++
		case c == ']':
			o.depth--
		}
	}
}

func (o *openScan) open() bool { return o.quoted || o.depth > 0 }

// lineAfter returns where the line holding b[at] ends, past its newline.
func lineAfter(b []byte, at int) int {
	if n := bytes.IndexByte(b[at:], '\n'); n >= 0 {
		return at + n + 1
	}
	return len(b)
}

// keyHot says whether the "key" at lower[at:] makes a secret name: one of keyBefore
// before it or keyAfter after it, with anything but letters and digits between.
func keyHot(lower []byte, at int) bool {
	before := bytes.TrimRightFunc(lower[:at], notAlnum)
	after := bytes.TrimLeftFunc(lower[at+len("key"):], notAlnum)
	for _, w := range keyBefore {
		if bytes.HasSuffix(before, []byte(w)) {
			return true
		}
	}
	for _, w := range keyAfter {
		if bytes.HasPrefix(after, []byte(w)) {
			return true
		}
	}
	return false
}

func notAlnum(r rune) bool { return (r < 'a' || r > 'z') && (r < '0' || r > '9') }

// asciiLower is b with ASCII letters in lower case, byte for byte (bytes.ToLower may
// change the length of what is not ASCII).
func asciiLower(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}
