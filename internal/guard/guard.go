package guard

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
)

// Finding is one user-defined rule: where it is and what it says.
type Finding struct {
	Table string // "filter" for iptables, "inet mine" for a native nftables table
	Chain string
	Rule  string
}

// Where is "table/chain", how status names a finding.
func (f Finding) Where() string { return f.Table + "/" + f.Chain }

// owned reports whether a chain name belongs to myelin or kube-proxy.
func owned(chain string) bool {
	return strings.HasPrefix(chain, "MYELIN-") || strings.HasPrefix(chain, "KUBE-")
}

// IPTablesFindings parses iptables-save output and returns the rules in chains that
// are not myelin's or kube-proxy's, except the jumps into those chains.
func IPTablesFindings(save string) []Finding {
	var out []Finding
	table := ""
	sc := bufio.NewScanner(strings.NewReader(save))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, "-A "):
			f := strings.Fields(line)
			if len(f) < 2 || owned(f[1]) {
				continue
			}
			if jump := target(f); owned(jump) {
				continue
			}
			out = append(out, Finding{Table: table, Chain: f[1], Rule: line})
		}
	}
	return out
}

func target(fields []string) string {
	for i := 0; i+1 < len(fields); i++ {
		if fields[i] == "-j" || fields[i] == "-g" {
			return fields[i+1]
		}
	}
	return ""
}

// iptablesTables are the nftables tables iptables-nft manages; their rules are read
// through iptables-save instead.
var iptablesTables = map[string]bool{"filter": true, "nat": true, "mangle": true, "raw": true, "security": true}

// NFTFindings parses `nft -j list ruleset` and returns the rules of native nftables
// tables that are neither myelin's nor kube-proxy's (tables iptables-nft manages are
// covered by IPTablesFindings).
func NFTFindings(ruleset []byte) ([]Finding, error) {
	var doc struct {
		Nftables []struct {
			Rule *struct {
				Family, Table, Chain string
				Handle               int
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(ruleset, &doc); err != nil {
		return nil, fmt.Errorf("parse nft ruleset: %w", err)
	}
	var out []Finding
	for _, item := range doc.Nftables {
		r := item.Rule
		if r == nil {
			continue
		}
		if (r.Family == "ip" || r.Family == "ip6") && iptablesTables[r.Table] {
			continue
		}
		if strings.HasPrefix(r.Table, "myelin") || strings.HasPrefix(r.Table, "kube-proxy") {
			continue
		}
		out = append(out, Finding{Table: r.Family + " " + r.Table, Chain: r.Chain, Rule: fmt.Sprintf("handle %d", r.Handle)})
	}
	return out, nil
}

// Places lists the distinct table/chain places of findings, sorted.
func Places(findings []Finding) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range findings {
		if w := f.Where(); !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	sort.Strings(out)
	return out
}

// Scan reads the node's iptables (IPv4 and IPv6) and nftables rules and returns the
// user-defined ones. A tool that is not installed contributes nothing.
func Scan() ([]Finding, error) {
	var out []Finding
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		b, err := exec.Command(tool).Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", tool, err)
		}
		out = append(out, IPTablesFindings(string(b))...)
	}
	if _, err := exec.LookPath("nft"); err == nil {
		b, err := exec.Command("nft", "-j", "list", "ruleset").Output()
		if err != nil {
			return nil, fmt.Errorf("nft list ruleset: %w", err)
		}
		f, err := NFTFindings(b)
		if err != nil {
			return nil, err
		}
		out = append(out, f...)
	}
	return out, nil
}
