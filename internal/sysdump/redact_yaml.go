package sysdump

import (
	"bytes"
	"regexp"
	"strings"
)

var (
	// A YAML key whose value is on the lines below: a block scalar (| or >) or, with an
	// empty value, a mapping.
	yamlBlockHead = regexp.MustCompile(`^([ \t]*(?:-[ \t]+)?)([A-Za-z0-9_.-]+):[ \t]*([|>][-+0-9]*)?[ \t]*\r?$`)
	// The line before an env entry's value: "- name: X".
	yamlEnvNameLine = regexp.MustCompile(`^[ \t]*-?[ \t]*name:[ \t]*["']?([A-Za-z0-9_.-]+)["']?[ \t]*\r?$`)
	// YAML env entries written value first: "- value: ..." then "name: X".
	// A Secret's data or stringData in flow style, {key: value, ...}, also over lines.
	yamlFlowData      = regexp.MustCompile(`(?m)^([ \t]*(?:-[ \t]+)?["']?(?:data|stringData)["']?:[ \t]*)\{[^{}]*\}`)
	yamlEnvValueFirst = regexp.MustCompile(`(?m)^([ \t]*-?[ \t]*value:[ \t]*)(\S.*)(\r?\n[ \t]*name:[ \t]*["']?([A-Za-z0-9_.-]+)["']?[ \t]*)$`)
)

// redactYAMLBlocks replaces the lines of a block scalar (key: | or >) whose key says
// secret, or that is the value of an env entry whose name does, and, in a Secret, the
// data and stringData mappings (also in flow style, {key: value}), by
// "key: [REDACTED]".
func redactYAMLBlocks(b []byte) []byte {
	if !bytes.Contains(b, []byte(":")) {
		return b
	}
	secret := secretKindYAML.Match(b)
	if secret {
		b = yamlFlowData.ReplaceAll(b, []byte("${1}"+Redacted))
	}
	lines := strings.SplitAfter(string(b), "\n")
	var out strings.Builder
	for i := 0; i < len(lines); i++ {
		line, last := redactYAMLHead(lines, i, secret)
		out.WriteString(line)
		i = last
	}
	return []byte(out.String())
}

// redactYAMLHead returns line i and i, or, when line i opens a block to redact, its
// key with [REDACTED] and the block's last line.
func redactYAMLHead(lines []string, i int, secret bool) (string, int) {
	g := yamlBlockHead.FindStringSubmatch(strings.TrimSuffix(lines[i], "\n"))
	if g == nil || !redactYAMLBlock(lines, i, g[2], g[3], secret) {
		return lines[i], i
	}
	column := len(g[1])
	j := i + 1
	for ; j < len(lines); j++ {
		rest := strings.TrimLeft(lines[j], " \t")
		if strings.TrimSpace(rest) != "" && len(lines[j])-len(rest) <= column {
			break
		}
	}
	return g[1] + g[2] + ": " + Redacted + "\n", j - 1
}

// redactYAMLBlock says whether the block under key (with block indicator ind, "" for
// a mapping) is secret.
func redactYAMLBlock(lines []string, i int, key, ind string, secret bool) bool {
	if ind == "" {
		return secret && (key == "data" || key == "stringData")
	}
	if secretName(key) {
		return true
	}
	if key == "value" && i > 0 {
		n := yamlEnvNameLine.FindStringSubmatch(strings.TrimSuffix(lines[i-1], "\n"))
		return n != nil && secretName(n[1])
	}
	return false
}

// redactYAMLEnvValueFirst redacts env entries whose value comes before their name.
func redactYAMLEnvValueFirst(b []byte) []byte {
	return yamlEnvValueFirst.ReplaceAllFunc(b, func(m []byte) []byte {
		g := yamlEnvValueFirst.FindSubmatch(m)
		if !secretName(string(g[4])) || bytes.Contains(g[2], []byte(Redacted)) {
			return m
		}
		return append(append(append([]byte(nil), g[1]...), Redacted...), g[3]...)
	})
}
