package iptables

import (
	"net/netip"
	"strings"
	"testing"
)

func TestMasqueradeRules(t *testing.T) {
	var keep []netip.Prefix
	for _, s := range []string{"10.0.0.0/8", "10.244.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "198.18.0.11/32"} {
		keep = append(keep, netip.MustParsePrefix(s))
	}
	rules := MasqueradeRules(netip.MustParsePrefix("10.244.0.0/16"), keep)
	for _, line := range []string{"*nat", ":MYELIN-POSTROUTING - [0:0]", "-A MYELIN-POSTROUTING -d 192.168.0.0/16 -j RETURN",
		"-A MYELIN-POSTROUTING -s 10.244.0.0/16 -m comment", "-j MASQUERADE", "COMMIT"} {
		if !strings.Contains(rules, line) {
			t.Errorf("rules lack %q:\n%s", line, rules)
		}
	}
	if strings.Index(rules, "RETURN") > strings.Index(rules, "MASQUERADE") {
		t.Errorf("RETURN rules must come before MASQUERADE:\n%s", rules)
	}
}
