package flowmetrics

import (
	"fmt"
	"slices"
	"strings"
)

// The metric families, as the hubble-metrics key names them (Hubble's names).
const (
	FamilyDNS              = "dns"
	FamilyDrop             = "drop"
	FamilyTCP              = "tcp"
	FamilyFlow             = "flow"
	FamilyICMP             = "icmp"
	FamilyPortDistribution = "port-distribution"
)

// Families are every family this build serves, in the hubble-metrics default's order.
var Families = []string{FamilyDNS, FamilyDrop, FamilyTCP, FamilyFlow, FamilyICMP, FamilyPortDistribution}

// ParseFamilies parses a comma-separated list of families (the hubble-metrics key):
// each one of Families, at most once; "" enables none. Hubble's per-family options
// ("dns:query;ignoreAAAA") and its L7 families are refused with what to do.
func ParseFamilies(v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var out []string
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		name, _, hasOptions := strings.Cut(f, ":")
		switch {
		case hasOptions && slices.Contains(Families, name):
			return nil, fmt.Errorf("%q: per-family options are not supported (labels are fixed and bounded); write %q", f, name)
		case name == "http" || name == "kafka" || name == "httpV2":
			return nil, fmt.Errorf("%q needs an L7 proxy, which myelin does not run; remove it (allowed: %s)", f, strings.Join(Families, ", "))
		case !slices.Contains(Families, name):
			return nil, fmt.Errorf("unknown metric family %q (allowed: %s)", f, strings.Join(Families, ", "))
		case slices.Contains(out, name):
			return nil, fmt.Errorf("metric family %q listed twice", name)
		}
		out = append(out, name)
	}
	return out, nil
}
