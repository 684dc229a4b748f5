package flow

import (
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
)

// ParseDNS reads a DNS message from a UDP payload (possibly cut short by the
// datapath's capture length): the first question (its name escaped, see
// presentName), whether it is a response, its rcode, and the A/AAAA answers that
// fit. A payload too short for the header and the first question is an error.
func ParseDNS(payload []byte) (*DNS, error) {
	var p dnsmessage.Parser
	h, err := p.Start(payload)
	if err != nil {
		return nil, fmt.Errorf("parse dns header: %w", err)
	}
	q, err := p.Question()
	if err != nil {
		return nil, fmt.Errorf("parse dns question: %w", err)
	}
	d := &DNS{
		Query:    dnsName(q.Name),
		QType:    strings.TrimPrefix(q.Type.String(), "Type"),
		Response: h.Response,
	}
	if !h.Response {
		return d, nil
	}
	d.RCode = rcodeName(h.RCode)
	if err := p.SkipAllQuestions(); err != nil {
		return d, nil // answers cut off by the capture length: the question is enough
	}
	for {
		ah, err := p.AnswerHeader()
		if err != nil {
			return d, nil // no more answers, or cut off
		}
		switch ah.Type {
		case dnsmessage.TypeA:
			r, err := p.AResource()
			if err != nil {
				return d, nil
			}
			d.IPs = append(d.IPs, netip.AddrFrom4(r.A).String())
		case dnsmessage.TypeAAAA:
			r, err := p.AAAAResource()
			if err != nil {
				return d, nil
			}
			d.IPs = append(d.IPs, netip.AddrFrom16(r.AAAA).String())
		default:
			if err := p.SkipAnswer(); err != nil {
				return d, nil
			}
		}
	}
}

// rcodeNames are the usual mnemonics (RFC 1035, 2136).
var rcodeNames = map[dnsmessage.RCode]string{
	dnsmessage.RCodeSuccess:        "NOERROR",
	dnsmessage.RCodeFormatError:    "FORMERR",
	dnsmessage.RCodeServerFailure:  "SERVFAIL",
	dnsmessage.RCodeNameError:      "NXDOMAIN",
	dnsmessage.RCodeNotImplemented: "NOTIMP",
	dnsmessage.RCodeRefused:        "REFUSED",
}

func rcodeName(c dnsmessage.RCode) string {
	if n, ok := rcodeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("RCODE%d", c)
}
