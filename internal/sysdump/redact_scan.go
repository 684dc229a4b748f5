package sysdump

import "bytes"

// What Redact finds by scanning bytes rather than by a regexp: it is the same match,
// without a regexp trying every byte of a large dump.

// redactBootstrapTokens replaces bootstrap tokens (kubeadm join --token): a
// 6-character id, a dot, 16 characters, \b[a-z0-9]{6}\.[a-z0-9]{16}\b, found from
// their dot.
func redactBootstrapTokens(b []byte) []byte {
	var out []byte
	last := 0
	for i := 0; ; {
		dot := bytes.IndexByte(b[i:], '.')
		if dot < 0 {
			break
		}
		dot += i
		i = dot + 1
		start, end := dot-6, dot+17
		if start < last || end > len(b) || !lowerAlnum(b[start:dot]) || !lowerAlnum(b[dot+1:end]) ||
			start > 0 && wordByte(b[start-1]) || end < len(b) && wordByte(b[end]) {
			continue
		}
		out = append(append(out, b[last:start]...), Redacted...)
		last, i = end, end
	}
	if last == 0 {
		return b
	}
	return append(out, b[last:]...)
}

func lowerAlnum(b []byte) bool {
	for _, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// wordByte says whether c is a word character to \b.
func wordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}

// redactFlatObjects redacts the value of env entries and key/value entries whose name
// says secret, also inside a JSON string: every JSON object without nested objects
// that holds a secret word.
func redactFlatObjects(b []byte) []byte {
	var out []byte
	last := 0
	for i := 0; ; {
		open := bytes.IndexByte(b[i:], '{')
		if open < 0 {
			break
		}
		open += i
		end := bytes.IndexAny(b[open+1:], "{}")
		if end < 0 {
			break
		}
		end += open + 1
		if b[end] == '{' {
			i = end
			continue
		}
		i = end + 1
		obj := b[open:i]
		if !mayNameSecret(obj) {
			continue
		}
		if r := redactFlatObject(obj); !bytes.Equal(r, obj) {
			out = append(append(out, b[last:open]...), r...)
			last = i
		}
	}
	if last == 0 {
		return b
	}
	return append(out, b[last:]...)
}

// redactFlatObject redacts one object of redactFlatObjects.
func redactFlatObject(m []byte) []byte {
	if n := envName.FindSubmatch(m); n != nil && secretName(string(n[1])) {
		return envValue.ReplaceAll(m, []byte(`${1}"`+Redacted+`"`))
	}
	if n := envNameEscaped.FindSubmatch(m); n != nil && secretName(string(n[1])) {
		return envValueEscaped.ReplaceAll(m, []byte(`${1}${2}`+Redacted+`${2}`))
	}
	return m
}
