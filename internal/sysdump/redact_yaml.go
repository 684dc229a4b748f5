package sysdump

import (
	"bytes"
	"regexp"
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

// redactYAMLBlocks replaces the lines of a block scalar (key: | or >) or a list of
// scalars whose key says secret, or that is the value of an env entry whose name
// does, and, in a Secret, the data and stringData mappings (also in flow style,
// {key: value}), by "key: [REDACTED]".
func redactYAMLBlocks(b []byte) []byte {
	if !bytes.Contains(b, []byte(":")) {
		return b
	}
	secret := bytes.Contains(b, []byte("Secret")) && secretKindYAML.Match(b)
	if secret {
		b = yamlFlowData.ReplaceAll(b, []byte("${1}"+Redacted))
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	var out []byte
	for i := 0; i < len(lines); i++ {
		line, last := redactYAMLHead(lines, i, secret)
		if last == i && out == nil {
			continue
		}
		if out == nil {
			out = bytes.Join(lines[:i], nil)
		}
		out = append(out, line...)
		i = last
	}
	if out == nil {
		return b
	}
	return out
}

// redactYAMLHead returns line i and i, or, when line i opens a block to redact, its
// key with [REDACTED] and the block's last line.
func redactYAMLHead(lines [][]byte, i int, secret bool) ([]byte, int) {
	if !mayOpenBlock(lines[i]) {
		return lines[i], i
	}
	g := yamlBlockHead.FindSubmatch(bytes.TrimSuffix(lines[i], []byte("\n")))
	if g == nil {
		return lines[i], i
	}
	column := len(g[1])
	if g[3] == nil && secretName(string(g[2])) {
		if end := yamlScalarList(lines, i, column); end > i {
			return []byte(string(g[1]) + string(g[2]) + ": " + Redacted + "\n"), end
		}
	}
	if !redactYAMLBlock(lines, i, string(g[2]), string(g[3]), secret) {
		return lines[i], i
	}
	j := i + 1
	for ; j < len(lines); j++ {
		rest := bytes.TrimLeft(lines[j], " \t")
		if len(bytes.TrimSpace(rest)) != 0 && len(lines[j])-len(rest) <= column {
			break
		}
	}
	return []byte(string(g[1]) + string(g[2]) + ": " + Redacted + "\n"), j - 1
}

// yamlScalarList returns the last line of the list of scalars under the key on line
// i at column ("tokens:" then "- abc", the items indented or not), or i when what
// follows is no such list (a mapping, a list of mappings: secretKeyRef's name and key,
// imagePullSecrets' names, stay).
func yamlScalarList(lines [][]byte, i, column int) int {
	last := i
	for j := i + 1; j < len(lines); j++ {
		rest := bytes.TrimLeft(lines[j], " \t")
		if len(bytes.TrimSpace(rest)) == 0 {
			continue
		}
		item, ok := bytes.CutPrefix(rest, []byte("- "))
		if indent := len(lines[j]) - len(rest); indent < column || !ok && indent <= column {
			break
		}
		if !ok || bytes.Contains(item, []byte(": ")) || bytes.HasSuffix(bytes.TrimSpace(item), []byte(":")) {
			return i
		}
		last = j
	}
	return last
}

// mayOpenBlock says whether line may match yamlBlockHead: what follows its last
// colon is empty or a block indicator.
func mayOpenBlock(line []byte) bool {
	colon := bytes.LastIndexByte(line, ':')
	if colon < 0 {
		return false
	}
	rest := bytes.TrimSpace(line[colon+1:])
	return len(rest) == 0 || rest[0] == '|' || rest[0] == '>'
}

// redactYAMLBlock says whether the block under key (with block indicator ind, "" for
// a mapping) is secret.
func redactYAMLBlock(lines [][]byte, i int, key, ind string, secret bool) bool {
	if ind == "" {
		return secret && (key == "data" || key == "stringData")
	}
	if secretName(key) {
		return true
	}
	if key == "value" && i > 0 {
		n := yamlEnvNameLine.FindSubmatch(bytes.TrimSuffix(lines[i-1], []byte("\n")))
		return n != nil && secretName(string(n[1]))
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
