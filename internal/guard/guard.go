package guard

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
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

// IPTablesFindings parses iptables-save output (or `iptables -S` of one chain
// after a "*table" line) and returns the rules in chains that are not myelin's or
// kube-proxy's, except the jumps into those chains.
func IPTablesFindings(save string) []Finding {
	var out []Finding
	table := ""
	sc := bufio.NewScanner(strings.NewReader(save))
	sc.Buffer(nil, 1<<20)
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
// through iptables instead.
var iptablesTables = map[string]bool{"filter": true, "nat": true, "mangle": true, "raw": true, "security": true}

// NFTFindings parses `nft -j list table` of a table that is neither myelin's nor
// kube-proxy's and returns its rules.
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
		out = append(out, Finding{Table: r.Family + " " + r.Table, Chain: r.Chain, Rule: fmt.Sprintf("handle %d", r.Handle)})
	}
	return out, nil
}

// userTable reports whether an nftables table is the user's: not one iptables-nft
// manages (its rules are read through iptables), nor myelin's or kube-proxy's.
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

// nftables netlink: the table dump request and the table name attribute
// (linux/netfilter/nf_tables.h).
const (
	nftMsgGetTable = 1 // NFT_MSG_GETTABLE
	nftaTableName  = 1 // NFTA_TABLE_NAME
)

// nftFamilies names the nftables address families (NFPROTO_*) as nft does.
var nftFamilies = map[uint8]string{
	unix.NFPROTO_INET: "inet", unix.NFPROTO_IPV4: "ip", unix.NFPROTO_ARP: "arp",
	unix.NFPROTO_NETDEV: "netdev", unix.NFPROTO_BRIDGE: "bridge", unix.NFPROTO_IPV6: "ip6",
}

// nftTables lists the node's nftables tables with one netlink dump of table objects.
// `nft list tables` would do, but nft 1.0.6 reads every rule of every table to answer
// it: 13 s (85 s with -j) on a node whose iptables-nft tables hold kube-proxy's rules
// for 10,000 Services.
func nftTables() ([]NFTTable, error) {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|nftMsgGetTable, unix.NLM_F_DUMP)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_UNSPEC, Version: nl.NFNETLINK_V0})
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPROTONOSUPPORT) {
		return nil, nil // a kernel without nf_tables has no tables
	}
	if err != nil {
		return nil, fmt.Errorf("list nftables tables (netlink): %w", err)
	}
	return parseNFTTables(msgs)
}

// parseNFTTables reads the tables of an NFT_MSG_GETTABLE dump: each message is an
// nfgenmsg (the family first) and attributes.
func parseNFTTables(msgs [][]byte) ([]NFTTable, error) {
	var out []NFTTable
	for _, m := range msgs {
		if len(m) < nl.SizeofNfgenmsg {
			return nil, fmt.Errorf("nftables table message of %d bytes, shorter than its header", len(m))
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofNfgenmsg:])
		if err != nil {
			return nil, fmt.Errorf("parse nftables table message: %w", err)
		}
		t := NFTTable{Family: nftFamilies[m[0]]}
		if t.Family == "" {
			t.Family = fmt.Sprintf("family-%d", m[0])
		}
		for _, a := range attrs {
			if a.Attr.Type == nftaTableName {
				t.Name = string(bytes.TrimRight(a.Value, "\x00"))
			}
		}
		out = append(out, t)
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

// builtinChains are the chains each iptables table is made with. Packets enter a
// table only through them, so a user chain acts only where one of them jumps to it,
// and that jump is itself a finding.
var builtinChains = map[string][]string{
	"filter":   {"INPUT", "FORWARD", "OUTPUT"},
	"nat":      {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"mangle":   {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
	"raw":      {"PREROUTING", "OUTPUT"},
	"security": {"INPUT", "FORWARD", "OUTPUT"},
}

// iptablesChains lists the built-in chains of the iptables-nft tables of one family
// ("ip" or "ip6") among tables, one `-S CHAIN` each. iptables-nft fetches only the
// chain it lists: 2 ms per chain where iptables-save reads every rule, 0.75 s of CPU
// with kube-proxy's rules for 10,000 Services. A table iptables calls incompatible
// (made with nft, in a form iptables does not know) is returned in foreign, for nft.
func iptablesChains(tool, family string, tables []NFTTable) (out []Finding, foreign []NFTTable, err error) {
	for _, t := range tables {
		if t.Family != family || !iptablesTables[t.Name] {
			continue
		}
		var found []Finding
		for _, chain := range builtinChains[t.Name] {
			var stderr bytes.Buffer
			cmd := exec.Command(tool, "-t", t.Name, "-S", chain)
			cmd.Stderr = &stderr
			b, err := cmd.Output()
			// An unknown chain fails; a built-in one with another priority or type
			// lists as a comment and hides its rules.
			if strings.Contains(stderr.String(), "incompatible") || strings.Contains(string(b), "incompatible") {
				found = nil
				foreign = append(foreign, t)
				break
			}
			if err != nil {
				return nil, nil, fmt.Errorf("%s -t %s -S %s: %w: %s", tool, t.Name, chain, err, strings.TrimSpace(stderr.String()))
			}
			found = append(found, IPTablesFindings("*"+t.Name+"\n"+string(b))...)
		}
		out = append(out, found...)
	}
	return out, foreign, nil
}

// nftBacked reports whether an iptables tool is iptables-nft, whose tables are
// nftables tables, rather than iptables-legacy.
func nftBacked(tool string) bool {
	b, err := exec.Command(tool, "-V").Output()
	return err == nil && strings.Contains(string(b), "nf_tables")
}

// Scan reads the node's iptables (IPv4 and IPv6) and nftables rules and returns the
// user-defined ones. A tool that is not installed contributes nothing.
func Scan() ([]Finding, error) {
	tables, err := nftTables()
	if err != nil {
		return nil, err
	}
	var out []Finding
	var nftRead []NFTTable // tables to read with nft
	for _, t := range tables {
		if userTable(t.Family, t.Name) { // kube-proxy's hold a rule per Service and endpoint: never read
			nftRead = append(nftRead, t)
		}
	}
	for _, ipt := range []struct{ tool, family string }{{"iptables", "ip"}, {"ip6tables", "ip6"}} {
		if _, err := exec.LookPath(ipt.tool); err != nil {
			continue
		}
		if nftBacked(ipt.tool) {
			f, foreign, err := iptablesChains(ipt.tool, ipt.family, tables)
			if err != nil {
				return nil, err
			}
			out = append(out, f...)
			nftRead = append(nftRead, foreign...)
			continue
		}
		b, err := exec.Command(ipt.tool + "-save").Output()
		if err != nil {
			return nil, fmt.Errorf("%s-save: %w", ipt.tool, err)
		}
		out = append(out, IPTablesFindings(string(b))...)
	}
	if len(nftRead) == 0 {
		return out, nil
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return nil, fmt.Errorf("nftables tables %v need the nft tool to be read: install nftables on the node", nftRead)
	}
	for _, t := range nftRead {
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
