package guard

import (
	"bufio"
	"bytes"
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

// NFTFindings parses `nft -j list ruleset` (or list table) and returns the rules of native nftables
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
		if !userTable(r.Family, r.Table) {
			continue
		}
		out = append(out, Finding{Table: r.Family + " " + r.Table, Chain: r.Chain, Rule: fmt.Sprintf("handle %d", r.Handle)})
	}
	return out, nil
}

// userTable reports whether an nftables table is the user's: not one iptables-nft
// manages (its rules are read through iptables-save), nor myelin's or kube-proxy's.
func userTable(family, name string) bool {
	if (family == "ip" || family == "ip6") && iptablesTables[name] {
		return false
	}
	return !strings.HasPrefix(name, "myelin") && !strings.HasPrefix(name, "kube-proxy")
}

// An NFTTable is a native nftables table.
type NFTTable struct {
	Family, Name string
}

// NFTUserTables parses `nft -j list tables` and returns the user's tables (userTable),
// the only ones Scan lists rules of: kube-proxy's tables hold rules for every Service
// and endpoint, and listing them all as JSON cost an agent ~100 s of CPU per scan
// with 10,000 Services.
func NFTUserTables(list []byte) ([]NFTTable, error) {
	var doc struct {
		Nftables []struct {
			Table *struct{ Family, Name string } `json:"table"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(list, &doc); err != nil {
		return nil, fmt.Errorf("parse nft tables: %w", err)
	}
	var out []NFTTable
	for _, item := range doc.Nftables {
		if t := item.Table; t != nil && userTable(t.Family, t.Name) {
			out = append(out, NFTTable{Family: t.Family, Name: t.Name})
		}
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
	if _, err := exec.LookPath("nft"); err != nil {
		return out, nil
	}
	b, err := exec.Command("nft", "-j", "list", "tables").Output()
	if err != nil {
		return nil, fmt.Errorf("nft list tables: %w", err)
	}
	tables, err := NFTUserTables(b)
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		var stderr bytes.Buffer
		cmd := exec.Command("nft", "-j", "list", "table", t.Family, t.Name)
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			if strings.Contains(stderr.String(), "No such file or directory") {
				continue // deleted since it was listed
			}
			return nil, fmt.Errorf("nft list table %s %s: %w: %s", t.Family, t.Name, err, strings.TrimSpace(stderr.String()))
		}
		f, err := NFTFindings(b)
		if err != nil {
			return nil, err
		}
		out = append(out, f...)
	}
	return out, nil
}
