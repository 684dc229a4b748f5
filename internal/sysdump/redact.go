package sysdump

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
)

// Redacted replaces every value Redact removes.
const Redacted = "[REDACTED]"

var (
	// PEM blocks of keys (any kind, PGP's too), also one cut off by a log's end, which
	// ends where its base64 and headers (Proc-Type: 4,ENCRYPTED) do; certificates are
	// public and kept.
	pemKey = regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|(?:[A-Za-z0-9+/=:,\s-]|\\n|\\r)*)`)
	// JSON Web Tokens (ServiceAccount tokens): three base64url parts, the first {"alg";
	// also unsigned ones (alg none: an empty signature after a {"claims" part).
	jwt = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.(?:eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*|[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})`)
	// Tokens that say what they are by their prefix, also with no name beside them:
	// GitHub (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_), GitLab (glpat-), EKS
	// (k8s-aws-v1.), Google OAuth access tokens (ya29., GKE) and Slack (xoxb- ...).
	prefixedToken = regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|glpat-[A-Za-z0-9_-]{20,}|k8s-aws-v1\.[A-Za-z0-9_-]{20,}|ya29\.[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,})`)
	// Authorization headers in text (Basic, Bearer, Digest ...): the scheme is kept.
	authHeader = regexp.MustCompile(`(?i)(\b(?:proxy-)?authorization\s*[:=]\s*(?:(?:basic|bearer|digest|negotiate|token)\s+)?)[^\s"\\][^\r\n"\\]*`)
	// Digest credentials: every key=value parameter after the scheme.
	digest = regexp.MustCompile(`(?i)(\bdigest\s+)(?:[a-z]+=(?:\\?"[^"\\\r\n]*\\?"|[^\s,"\\]+)(?:[ \t]*,[ \t]*)?)+`)
	// Bearer tokens anywhere: on the line of "bearer" or the next (a word followed by
	// a colon there is a key, whose value the name rules judge: redactBearer).
	bearer = regexp.MustCompile(`(?i)(\bbearer(?:[ \t]+|[ \t]*\r?\n[ \t]*))[A-Za-z0-9._~+/=-]+`)
	// Passwords in URLs: scheme://user:password@host, also without a user
	// (redis://:password@host).
	urlUserinfo = regexp.MustCompile(`(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@"'\\]*:)[^/\s@"'\\]+@`)
	// A token as a URL's user (git over https: https://TOKEN@github.com): a user of 20
	// characters or more.
	urlToken = regexp.MustCompile(`(\b[A-Za-z][A-Za-z0-9+.-]*://)[A-Za-z0-9_.~-]{20,}@`)
	// Every JSON string or number field; secretName decides.
	jsonField = regexp.MustCompile(`("((?:[^"\\]|\\.)*)"\s*:\s*)(?:"(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*)`)
	// JSON lists of strings or numbers ("tokens": ["abc", "def"]).
	jsonList = regexp.MustCompile(`("((?:[^"\\]|\\.)*)"\s*:\s*)\[\s*(?:(?:"(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*)\s*,?\s*)+\]`)
	// JSON string and number fields inside a JSON string (an annotation holding a
	// document).
	escapedField = regexp.MustCompile(`(\\"([A-Za-z0-9_.-]*)\\"\s*:\s*)(?:\\"(?:[^\\]|\\[^"])*?\\"|-?[0-9][0-9.eE+-]*)`)
	// In JSON objects without nested objects: env entries {"name": ..., "value": ...}
	// and key/value entries {"key": ..., "value": ...} (the agent's configuration
	// view).
	envName  = regexp.MustCompile(`"(?:name|key)"\s*:\s*"((?:[^"\\]|\\.)*)"`)
	envValue = regexp.MustCompile(`("value"\s*:\s*)(?:"(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*)`)
	// The same inside a JSON string (a last-applied annotation): quotes escaped.
	envNameEscaped  = regexp.MustCompile(`\\+"(?:name|key)\\+"\s*:\s*\\+"([A-Za-z0-9_.-]*)\\+"`)
	envValueEscaped = regexp.MustCompile(`(\\+"value\\+"\s*:\s*)(\\+")(?:[^"\\]|\\[^"])*\\+"`)
	// YAML env entries: "- name: X" then "value: ...".
	yamlEnv = regexp.MustCompile(`(?m)^(\s*-?\s*name:\s*["']?([A-Za-z0-9_.-]+)["']?[ \t]*\r?\n\s*value:[ \t]*)(\S.*)$`)
	// YAML and key=value lines: name: value, name = value.
	yamlField = regexp.MustCompile(`(?m)^(\s*-?\s*([A-Za-z0-9_.-]+)\s*[:=][ \t]*)(\S.*)$`)
	// "Name: value" inside a line (a header in a log message) and Go's %+v of a
	// struct, {Name:value Other:value}.
	inlineField = regexp.MustCompile(`(\b([A-Za-z][A-Za-z0-9_.-]*):[ \t]*)([^\s"',;\\]+)`)
	// Command-line flags and their value as the next argument: --token VALUE, also in a
	// JSON list ["--token", "VALUE"]; a value is no flag.
	flagValue = regexp.MustCompile(`(?m)((?:^|[\s"'\[,])--?([A-Za-z][A-Za-z0-9_.-]*)(?:[ \t]+|"\s*,\s*"|'\s*,\s*'))([^\s"',\[\]\\-][^\s"',\]\\]*)`)
	// curl's user:password (-u, --user, --proxy-user, -U), the password after the
	// first colon: -u user:pw, -uuser:pw, --user=user:pw, ["-u", "user:pw"].
	userFlag = regexp.MustCompile(`((?:^|[\s"'\[,])(?:-[uU](?:[ \t]+|=|"\s*,\s*"|'\s*,\s*')?|--(?:proxy-)?user(?:[ \t]+|=|"\s*,\s*"|'\s*,\s*'))["']?[^\s"':\\]*:)([^\s"'\\]+)`)
	// Environment-style NAME=value pairs (command lines, logs, --flag=value), the value
	// quoted (also with escaped quotes inside a JSON string) or not.
	envPairQuoted = regexp.MustCompile(`\b(([A-Za-z0-9_.-]+)=)(\\?"(?:[^"\\]|\\[^"])*\\?"|'[^'\r\n]*')`)
	envPair       = regexp.MustCompile(`\b(([A-Za-z0-9_.-]+)=)([^\s"',\\]+)`)
	// What splits a field's name into words: camelCase and separators.
	camel = regexp.MustCompile(`([a-z0-9])([A-Z])`)
)

// secretName says whether a field or variable name says its value is secret: it
// contains token, password, passwd, secret, apikey, privatekey, credential, key-data,
// client-key, access-key, certificate-key (kubeadm's) or dockerconfig/dockercfg, or has a word pass, pwd, auth, authorization or
// cookie; unless its last word is name, file, path or dir (secretName: hubble-tls,
// token-file: /var/run/...: what they name is not the secret). It errs on the side of
// yes.
func secretName(name string) bool {
	words := strings.FieldsFunc(strings.ToLower(camel.ReplaceAllString(name, "${1}_${2}")), func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9')
	})
	if len(words) > 1 {
		switch words[len(words)-1] {
		case "name", "file", "path", "dir":
			return false
		}
	}
	joined := strings.Join(words, "")
	for _, s := range secretParts {
		if strings.Contains(joined, s) {
			return true
		}
	}
	for _, w := range words {
		if slices.Contains(secretNameWords, w) {
			return true
		}
	}
	return false
}

// What a name says secret with (secretName; hotSpans' secretWords must find every
// one, in any spelling): a part of its words joined, or one of its words.
var (
	secretParts     = []string{"token", "password", "passwd", "secret", "apikey", "privatekey", "credential", "keydata", "clientkey", "accesskey", "certificatekey", "dockerconfig", "dockercfg"}
	secretNameWords = []string{"pass", "pwd", "auth", "authorization", "cookie"}
)

// redactNamed replaces the value (what follows group 1) of a match of re whose group 2
// is a secret name, unless it was redacted already or is a boolean or null (a switch,
// automountServiceAccountToken: false, not a secret).
func redactNamed(b []byte, re *regexp.Regexp, quoted string) []byte {
	return re.ReplaceAllFunc(b, func(m []byte) []byte {
		g := re.FindSubmatch(m)
		v := string(m[len(g[1]):])
		if !secretName(string(g[2])) || strings.Contains(v, Redacted) || notSecretValue(v) {
			return m
		}
		return append(append([]byte(nil), g[1]...), quoted+Redacted+quoted...)
	})
}

// notSecretValue says whether an unquoted value is a YAML or JSON boolean or null.
func notSecretValue(v string) bool {
	switch strings.ToLower(strings.TrimSpace(strings.TrimSuffix(v, ","))) {
	case "true", "false", "null":
		return true
	}
	return false
}

// Redact returns b with every value that looks like a token, key or password replaced
// by Redacted. It errs on the side of removing: a bug report never needs them.
func Redact(b []byte) []byte { return redact(b, 0) }

// redact is Redact of text found depth base64 decodings deep. The rules whose
// regexp starts with no literal run only on the lines holding a word their matches
// hold (hotWords), and the lines around them a match may span (onHotLines).
func redact(b []byte, depth int) []byte {
	b = pemKey.ReplaceAll(b, []byte(Redacted))
	b = jwt.ReplaceAll(b, []byte(Redacted))
	if depth < maxDecodeDepth {
		b = redactBase64(b, depth)
	}
	b = redactSecretData(b)
	b = redactBootstrapTokens(b)
	b = redactFlatObjects(b)
	b = redactYAMLBlocks(b)
	// Each rule below runs on the lines holding its own words, inside those holding
	// any rule's. What it matches spans at most a line before the one holding the
	// word (an env entry's value before its name) and two after, blank lines not
	// counted (a flag's value on the next line of an indented JSON list), and up to
	// the end of a quote or a JSON list the word's lines leave open (at most 256
	// lines further: closeOpen).
	return onHotLines(b, hotWords, 1, 2, func(l []byte) []byte {
		l = onHotLines(l, tokenPrefixes, 0, 0, func(l []byte) []byte { return prefixedToken.ReplaceAll(l, []byte(Redacted)) })
		l = onHotLines(l, headerWords, 0, 1, redactHeaders)
		l = onHotLines(l, []string{"@"}, 0, 0, redactURLUsers)
		l = onHotLines(l, []string{"-u"}, 0, 1, redactUserFlag)
		return onHotLines(l, secretWords, 1, 2, func(l []byte) []byte { return redactNames(redactJSONStrings(l, depth)) })
	})
}

// What the matches of the rules redact runs on hot lines hold, lowercase: the first
// letters of a prefixedToken, digest, authorization or bearer, the @ of a URL's
// userinfo, curl's -u, --user or -U, and secretWords.
var (
	tokenPrefixes = []string{"gh", "glpat-", "k8s-aws-v1.", "ya29.", "xox"}
	headerWords   = []string{"digest", "authorization", "bearer"}
	hotWords      = slices.Concat(tokenPrefixes, headerWords, []string{"@", "-u"}, secretWords)
)

// redactURLUsers redacts passwords in URLs and tokens as their user.
func redactURLUsers(b []byte) []byte {
	b = urlUserinfo.ReplaceAll(b, []byte("${1}"+Redacted+"@"))
	return urlToken.ReplaceAll(b, []byte("${1}"+Redacted+"@"))
}

// redactHeaders redacts Digest parameters, Authorization headers and bearer tokens.
func redactHeaders(b []byte) []byte {
	b = digest.ReplaceAll(b, []byte("${1}"+Redacted))
	b = authHeader.ReplaceAll(b, []byte("${1}"+Redacted))
	return redactBearer(b)
}

// redactBearer replaces the token after each "bearer", unless what follows it is a
// key (a colon: "type: bearer" then "token: abc" on the next line), whose value the
// name rules redact; replaced, the key's name would hide the value from them.
func redactBearer(b []byte) []byte {
	var out []byte
	last := 0
	for _, m := range bearer.FindAllSubmatchIndex(b, -1) {
		if m[1] < len(b) && b[m[1]] == ':' {
			continue
		}
		out = append(append(out, b[last:m[3]]...), Redacted...)
		last = m[1]
	}
	if last == 0 {
		return b
	}
	return append(out, b[last:]...)
}

// redactUserFlag redacts the password of curl's -u user:password.
func redactUserFlag(b []byte) []byte {
	return userFlag.ReplaceAllFunc(b, func(m []byte) []byte {
		if bytes.Contains(m, []byte(Redacted)) {
			return m
		}
		return append(userFlag.ReplaceAll(m, []byte("${1}")), Redacted...)
	})
}

// redactNames redacts the value of every field, entry, flag and pair whose name says
// secret.
func redactNames(b []byte) []byte {
	b = redactNamed(b, jsonField, `"`)
	b = redactNamed(b, jsonList, `"`)
	b = redactNamed(b, escapedField, `\"`)
	b = redactYAMLEnvValueFirst(b)
	b = redactNamed(b, yamlEnv, "")
	b = redactNamed(b, yamlField, "")
	b = redactInline(b)
	b = redactNamed(b, flagValue, "")
	b = redactQuotedPairs(b)
	return redactNamed(b, envPair, "")
}

// redactInline redacts "Name: value" inside lines; Authorization headers are
// authHeader's, which keeps their scheme. A value that is not secret may hold the next
// field ("Username: Password:x"): it is looked into.
func redactInline(b []byte) []byte {
	return inlineField.ReplaceAllFunc(b, func(m []byte) []byte {
		g := inlineField.FindSubmatch(m)
		if strings.HasSuffix(strings.ToLower(string(g[2])), "authorization") {
			return m
		}
		if !secretName(string(g[2])) {
			return append(append([]byte(nil), g[1]...), redactInline(g[3])...)
		}
		if strings.Contains(string(g[3]), Redacted) || notSecretValue(string(g[3])) {
			return m
		}
		return append(append([]byte(nil), g[1]...), Redacted...)
	})
}

// redactQuotedPairs redacts NAME="value" pairs, keeping the quotes as they are.
func redactQuotedPairs(b []byte) []byte {
	return envPairQuoted.ReplaceAllFunc(b, func(m []byte) []byte {
		g := envPairQuoted.FindSubmatch(m)
		v := string(g[3])
		if !secretName(string(g[2])) || strings.Contains(v, Redacted) {
			return m
		}
		q := v[:1]
		if strings.HasPrefix(v, `\"`) {
			q = `\"`
		}
		return []byte(string(g[1]) + q + Redacted + q)
	})
}
