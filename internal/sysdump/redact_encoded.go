package sysdump

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"regexp"
	"unicode/utf8"
)

// maxDecodeDepth bounds how deep Redact looks into base64 inside base64 (a Secret's
// .data holding a kubeconfig holding client-key-data).
const maxDecodeDepth = 2

var (
	// Runs of base64 long enough to hold a key or a token, also wrapped over lines (a
	// YAML block, a PEM body; \n or \r\n) or over \n or \r\n escapes (inside a JSON
	// string). A run may end in the \r of its last line.
	base64Run = regexp.MustCompile(`(?m)\A[A-Za-z0-9+/]{40,}={0,2}(?:\r?\n[ \t]*[A-Za-z0-9+/]+={0,2}\r?$|(?:\\r\\n|\\[rn])[A-Za-z0-9+/]+={0,2})*`)
	base64Gap = regexp.MustCompile(`\s+|\\[rn]|=+`)
	// A Secret, in JSON (also escaped inside a JSON string) or YAML.
	secretKindJSON = regexp.MustCompile(`\\*"kind\\*"\s*:\s*\\*"Secret\\*"`)
	secretKindYAML = regexp.MustCompile(`(?m)^[ \t]*(?:-[ \t]+)?kind:[ \t]*["']?Secret["']?[ \t]*\r?$`)
	// A Secret's data or stringData object (no nested objects), its quotes as escaped
	// as they are.
	secretDataJSON = regexp.MustCompile(`(\\*")(data|stringData)\\*"\s*:\s*\{[^{}]*\}`)
	// A JSON string on one line.
	jsonString = regexp.MustCompile(`"(?:[^"\\\r\n]|\\.)*"`)
)

// redactBase64 replaces every base64 run that decodes to a private key or to text
// Redact would change (a token, a kubeconfig, image pull credentials). A run starts
// where 40 base64 characters follow one another (base64RunStart).
func redactBase64(b []byte, depth int) []byte {
	var out []byte
	last := 0
	for i := 0; ; {
		start := base64RunStart(b, i)
		if start < 0 {
			break
		}
		end := start + base64Run.FindIndex(base64Window(b[start:]))[1]
		i = end
		if r := redactBase64Run(b[start:end], depth); r != nil {
			out = append(append(out, b[last:start]...), r...)
			last = end
		}
	}
	if last == 0 {
		return b
	}
	return append(out, b[last:]...)
}

// base64Window is the start of b a base64Run match from b's start may cover: the
// bytes it may hold and the one after them (where $ would not match). It follows the
// match's grammar and ends at the first byte the match can't take there, or text
// after one run would be scanned to its end for every run (quadratic in a tenant's
// annotation): base64 goes on through padding, a line break (raw \r\n or \n, then
// indentation and base64: a blank line ends it) or a JSON string's \n, \r or \r\n
// escape followed by base64; anything else (a space, base64 after '=', a \t escape)
// ends it.
func base64Window(b []byte) []byte {
	const (
		inRun     = iota // in base64 or its padding
		afterCR          // a raw \r: \n must follow
		lineStart        // a raw \n, then indentation: base64 must follow
		afterEscR        // the escape \r: the escape \n or base64 must follow
		afterEsc         // the escape \n: base64 must follow
	)
	state, padded := inRun, false
	escape := func(i int, c byte) bool { return b[i] == '\\' && i+1 < len(b) && b[i+1] == c }
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case state == inRun && isBase64[c] && !padded:
			continue
		case state == inRun && c == '=':
			padded = true
			continue
		case state == inRun && c == '\r':
			state = afterCR
			continue
		case (state == inRun || state == afterCR) && c == '\n':
			state = lineStart
			continue
		case state == lineStart && (c == ' ' || c == '\t'):
			continue
		case state == inRun && escape(i, 'r'):
			state, i = afterEscR, i+1
			continue
		case (state == inRun || state == afterEscR) && escape(i, 'n'):
			state, i = afterEsc, i+1
			continue
		case state != inRun && state != afterCR && isBase64[c]:
			state, padded = inRun, false
			continue
		}
		return b[:i+1]
	}
	return b
}

// base64RunStart returns where the first run of 40 or more base64 characters from
// b[i:] starts, or -1.
func base64RunStart(b []byte, i int) int {
	n := 0
	for ; i < len(b); i++ {
		if !isBase64[b[i]] {
			n = 0
			continue
		}
		if n++; n == 40 {
			return i - 39
		}
	}
	return -1
}

var isBase64 = func() (t [256]bool) {
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") {
		t[c] = true
	}
	return t
}()

// redactBase64Run returns what replaces the base64 run m, or nil when m stays.
func redactBase64Run(m []byte, depth int) []byte {
	clean := base64Gap.ReplaceAll(m, nil)
	if len(clean)%4 == 1 {
		clean = clean[:len(clean)-1] // cut off: decode what is whole
	}
	dec, err := base64.RawStdEncoding.DecodeString(string(clean))
	if err != nil {
		return nil
	}
	if !bytes.Contains(dec, []byte("PRIVATE KEY")) && (!utf8.Valid(dec) || bytes.Equal(redact(dec, depth+1), dec)) {
		return nil
	}
	if bytes.HasSuffix(m, []byte("\r")) {
		return []byte(Redacted + "\r")
	}
	return []byte(Redacted)
}

// redactJSONStrings redacts the text inside JSON strings that hold a document or
// lines (escaped quotes or newlines: JSON inside JSON, escaped twice or more, YAML
// in a ConfigMap's value) and a word a secret's name has: decoded, redacted as a file
// of its own would be, and encoded again when that changed it.
func redactJSONStrings(b []byte, depth int) []byte {
	return jsonString.ReplaceAllFunc(b, func(m []byte) []byte {
		if !bytes.Contains(m, []byte(`\"`)) && !bytes.Contains(m, []byte(`\n`)) || !mayNameSecret(m) {
			return m
		}
		var s string
		if json.Unmarshal(m, &s) != nil {
			return m
		}
		r := redact([]byte(s), depth)
		if bytes.Equal(r, []byte(s)) {
			return m
		}
		var out bytes.Buffer
		enc := json.NewEncoder(&out)
		enc.SetEscapeHTML(false)
		if enc.Encode(string(r)) != nil {
			return m
		}
		return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
	})
}

// redactSecretData replaces the data and stringData of a Secret in JSON (whatever
// its keys: a Secret's values are secret by definition); the YAML form is
// redactYAMLBlocks'.
func redactSecretData(b []byte) []byte {
	if !bytes.Contains(b, []byte(`"Secret`)) || !secretKindJSON.Match(b) {
		return b
	}
	return secretDataJSON.ReplaceAllFunc(b, func(m []byte) []byte {
		g := secretDataJSON.FindSubmatch(m)
		q := string(g[1])
		return []byte(q + string(g[2]) + q + ": " + q + Redacted + q)
	})
}
