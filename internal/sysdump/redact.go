package sysdump

import (
	"regexp"
)

// Redacted replaces every value Redact removes.
const Redacted = "[REDACTED]"

var (
	// PEM blocks of keys (any kind); certificates are public and kept.
	pemKey = regexp.MustCompile(`(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----`)
	// JSON Web Tokens (ServiceAccount tokens): three base64url parts, the first {"alg".
	jwt = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`)
	// Authorization headers and bearer tokens in logs.
	bearer = regexp.MustCompile(`(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}`)
	// JSON and YAML fields whose name says secret: "token": "...", password: ..., and
	// the kubeconfig-style client-key-data / token fields.
	secretJSON = regexp.MustCompile(`(?i)("[a-z0-9_.-]*(?:token|password|passwd|secret|apikey|api-key|api_key|private-?key|key-data|credentials?)[a-z0-9_.-]*"\s*:\s*)"(?:[^"\\]|\\.)*"`)
	secretYAML = regexp.MustCompile(`(?im)^(\s*-?\s*[a-z0-9_.-]*(?:token|password|passwd|secret|apikey|api-key|api_key|private-?key|key-data|credentials?)[a-z0-9_.-]*\s*[:=]\s*)(\S.*)$`)
	// Kubernetes env entries whose name says secret: {"name": "API_TOKEN", "value": "..."}.
	secretEnvVar = regexp.MustCompile(`(?i)("name"\s*:\s*"[^"]*(?:token|password|passwd|secret|api_?key|private_?key|credentials?)[^"]*"\s*,\s*"value"\s*:\s*)"(?:[^"\\]|\\.)*"`)
	// Environment-style NAME=value pairs naming a secret (command lines, logs).
	secretEnv = regexp.MustCompile(`(?i)\b([A-Z0-9_]*(?:TOKEN|PASSWORD|SECRET|API_KEY|PRIVATE_KEY)[A-Z0-9_]*=)(\S+)`)
)

// Redact returns b with every value that looks like a token, key or password replaced
// by Redacted. It errs on the side of removing: a bug report never needs them.
func Redact(b []byte) []byte {
	b = pemKey.ReplaceAll(b, []byte(Redacted))
	b = jwt.ReplaceAll(b, []byte(Redacted))
	b = bearer.ReplaceAll(b, []byte("${1}"+Redacted))
	b = secretJSON.ReplaceAll(b, []byte(`${1}"`+Redacted+`"`))
	b = secretEnvVar.ReplaceAll(b, []byte(`${1}"`+Redacted+`"`))
	b = secretYAML.ReplaceAllFunc(b, func(m []byte) []byte {
		if secretJSON.Match(m) {
			return m // already a redacted JSON field on its own line
		}
		return secretYAML.ReplaceAll(m, []byte("${1}"+Redacted))
	})
	return secretEnv.ReplaceAll(b, []byte("${1}"+Redacted))
}
