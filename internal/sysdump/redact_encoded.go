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
	base64Run = regexp.MustCompile(`(?m)[A-Za-z0-9+/]{40,}={0,2}(?:\r?\n[ \t]*[A-Za-z0-9+/]+={0,2}\r?$|(?:\\r\\n|\\[rn])[A-Za-z0-9+/]+={0,2})*`)
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
// Redact would change (a token, a kubeconfig, image pull credentials).
func redactBase64(b []byte, depth int) []byte {
	return base64Run.ReplaceAllFunc(b, func(m []byte) []byte {
		clean := base64Gap.ReplaceAll(m, nil)
		if len(clean)%4 == 1 {
			clean = clean[:len(clean)-1] // cut off: decode what is whole
		}
		dec, err := base64.RawStdEncoding.DecodeString(string(clean))
		if err != nil {
			return m
		}
		if bytes.Contains(dec, []byte("PRIVATE KEY")) || utf8.Valid(dec) && !bytes.Equal(redact(dec, depth+1), dec) {
			if bytes.HasSuffix(m, []byte("\r")) {
				return []byte(Redacted + "\r")
			}
			return []byte(Redacted)
		}
		return m
	})
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
	if !secretKindJSON.Match(b) {
		return b
	}
	return secretDataJSON.ReplaceAllFunc(b, func(m []byte) []byte {
		g := secretDataJSON.FindSubmatch(m)
		q := string(g[1])
		return []byte(q + string(g[2]) + q + ": " + q + Redacted + q)
	})
}
