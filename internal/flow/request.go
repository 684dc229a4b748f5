package flow

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// A request's filters are matched against every flow it reads and, when it follows,
// every flow the node adds, on the adding goroutine: their size is the work a
// reader can make every flow cost, so every entry point (the Hubble API, GET
// /v1/flows, the store itself) refuses a request beyond these limits.
const (
	// MaxFilters bounds how many filters a request's whitelist holds, and its
	// blacklist: every filter is tried on every flow, whatever its values. `hubble
	// observe` sends one or two per list (a --pod or --ip flag is the source in one
	// and the destination in the other), `myelin observe` one or two.
	MaxFilters = 16
	// MaxFilterValues bounds how many values a request's filters hold: every filter
	// counts one, and every value of every field in it (a pod, an IP, a port, ...).
	MaxFilterValues = 256
	// MaxFilterValueLen bounds one filter value's length in bytes. The longest value a
	// filter can legitimately hold is a pod filter, namespace (a DNS label, 63 bytes),
	// "/" and pod name (a DNS subdomain, 253 bytes); Service, node, label and FQDN
	// names are no longer, IPs and CIDRs far shorter.
	MaxFilterValueLen = 63 + 1 + 253
	// MaxFilterBytes bounds the text of all of a request's filter values together:
	// MaxFilterValues values of 64 bytes, room for a few hundred namespace/pod names,
	// so that most values in a large filter are short.
	MaxFilterBytes = 16 << 10
)

// ErrInvalidFilter is what Request.Validate and the JSON form of a Filter return
// (wrapped) for a malformed or oversized filter: the client's mistake, not the
// node's (the Hubble API says InvalidArgument, GET /v1/flows 400).
var ErrInvalidFilter = errors.New("invalid filter")

// ParseIP parses an IP filter value: a CIDR, or an address, which selects itself
// (its /32 or /128 prefix).
func ParseIP(s string) (netip.Prefix, error) {
	if len(s) > MaxFilterValueLen {
		return netip.Prefix{}, fmt.Errorf("%s: longer than %d bytes, not an IP address or CIDR", QuoteValue(s), MaxFilterValueLen)
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%s: not a CIDR (e.g. 10.244.0.0/16, fd00::/64)", QuoteValue(s))
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%s: not an IP address or CIDR (e.g. 10.244.1.5, 10.244.0.0/16)", QuoteValue(s))
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// QuoteValue quotes a filter value for an error message, cut short when it is long
// (a client's oversized value is not echoed back whole).
func QuoteValue(s string) string {
	const show = 64
	if len(s) <= show {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:show], len(s))
}

// UnmarshalJSON reads a Filter's JSON form, parsing its IP values (addresses or
// CIDRs); a malformed one is an error wrapping ErrInvalidFilter that names the field.
func (f *Filter) UnmarshalJSON(b []byte) error {
	type plain Filter // without this method
	var w struct {
		plain
		SourceIP      []string `json:"sourceIP,omitempty"`
		DestinationIP []string `json:"destinationIP,omitempty"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*f = Filter(w.plain)
	var err error
	if f.SourceIP, err = parseIPs("sourceIP", w.SourceIP); err != nil {
		return err
	}
	f.DestinationIP, err = parseIPs("destinationIP", w.DestinationIP)
	return err
}

func parseIPs(field string, vals []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range vals {
		p, err := ParseIP(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %w", ErrInvalidFilter, field, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// Validate checks r's filters against MaxFilters, MaxFilterValues,
// MaxFilterValueLen and MaxFilterBytes, and that its IP values are set; the error
// wraps ErrInvalidFilter and names the list, or the filter, the field and the value.
func (r Request) Validate() error {
	if err := CheckFilterCount(len(r.Whitelist), len(r.Blacklist)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidFilter, err)
	}
	var sz filterSize
	for i, f := range r.Whitelist {
		if err := f.validate(&sz); err != nil {
			return fmt.Errorf("%w: whitelist filter %d: %w", ErrInvalidFilter, i, err)
		}
	}
	for i, f := range r.Blacklist {
		if err := f.validate(&sz); err != nil {
			return fmt.Errorf("%w: blacklist filter %d: %w", ErrInvalidFilter, i, err)
		}
	}
	if sz.values > MaxFilterValues {
		return fmt.Errorf("%w: the filters have %d values (filters, pods, IPs, ports, ...), at most %d are allowed: split the query or filter with fewer values",
			ErrInvalidFilter, sz.values, MaxFilterValues)
	}
	if sz.bytes > MaxFilterBytes {
		return fmt.Errorf("%w: the filters' values have %d bytes, at most %d are allowed: split the query or filter with fewer values",
			ErrInvalidFilter, sz.bytes, MaxFilterBytes)
	}
	return nil
}

// CheckFilterCount refuses a whitelist or blacklist of more than MaxFilters filters,
// naming the list, its count and the limit: the Hubble API checks the FlowFilters
// it gets before converting them, Validate a Request's.
func CheckFilterCount(whitelist, blacklist int) error {
	for _, l := range []struct {
		name string
		n    int
	}{{"whitelist", whitelist}, {"blacklist", blacklist}} {
		if l.n > MaxFilters {
			return fmt.Errorf("the %s has %d filters, at most %d are allowed: put the values in fewer filters (the values of one field are ORed) or split the query",
				l.name, l.n, MaxFilters)
		}
	}
	return nil
}

// filterSize adds up a request's filters: values counted, bytes of their text.
type filterSize struct{ values, bytes int }

func (f Filter) validate(sz *filterSize) error {
	sz.values++ // the filter itself
	for _, fv := range []struct {
		field string
		vals  []string
	}{
		{"sourcePod", f.SourcePod}, {"destinationPod", f.DestinationPod},
		{"sourceService", f.SourceService}, {"destinationService", f.DestinationService},
		{"protocol", f.Protocol}, {"node", f.Node},
	} {
		if err := texts(sz, fv.field, fv.vals); err != nil {
			return err
		}
	}
	if err := texts(sz, "verdict", f.Verdict); err != nil {
		return err
	}
	if err := texts(sz, "type", f.Type); err != nil {
		return err
	}
	if err := texts(sz, "direction", f.Direction); err != nil {
		return err
	}
	for _, ips := range []struct {
		field string
		vals  []netip.Prefix
	}{{"sourceIP", f.SourceIP}, {"destinationIP", f.DestinationIP}} {
		for _, p := range ips.vals {
			if !p.IsValid() {
				return fmt.Errorf("%s: an unset or invalid prefix: give an IP address or CIDR", ips.field)
			}
		}
		sz.values += len(ips.vals)
	}
	sz.values += len(f.Port)
	return nil
}

// texts counts vals into sz; a value longer than MaxFilterValueLen is an error
// naming field.
func texts[S ~string](sz *filterSize, field string, vals []S) error {
	for _, v := range vals {
		if len(v) > MaxFilterValueLen {
			return fmt.Errorf("%s %s: longer than %d bytes, the longest namespace/name a filter can hold",
				field, QuoteValue(string(v)), MaxFilterValueLen)
		}
		sz.bytes += len(v)
	}
	sz.values += len(vals)
	return nil
}
