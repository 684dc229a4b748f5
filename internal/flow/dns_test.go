package flow

import (
	"net/netip"
	"reflect"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// webName is the name the DNS tests query unless they test names.
const webName = "web.x.svc.cluster.local."

// dnsPacket is a DNS message for qname (any bytes but a dot inside a label): a query,
// or a response with rcode and A answers.
func dnsPacket(t *testing.T, qname string, response bool, rcode dnsmessage.RCode, answers ...netip.Addr) []byte {
	t.Helper()
	name, err := dnsmessage.NewName(qname)
	if err != nil {
		t.Fatal(err)
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, Response: response, RCode: rcode})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	if err := b.StartAnswers(); err != nil {
		t.Fatal(err)
	}
	for _, a := range answers {
		h := dnsmessage.ResourceHeader{Name: name, Class: dnsmessage.ClassINET, TTL: 30}
		if err := b.AResource(h, dnsmessage.AResource{A: a.As4()}); err != nil {
			t.Fatal(err)
		}
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func TestParseDNS(t *testing.T) {
	ip1, ip2 := netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.96.0.11")
	full := dnsPacket(t, webName, true, dnsmessage.RCodeSuccess, ip1, ip2)
	cases := []struct {
		name    string
		payload []byte
		want    *DNS
	}{
		{"query", dnsPacket(t, webName, false, 0), &DNS{Query: "web.x.svc.cluster.local.", QType: "A"}},
		{"response with answers", full,
			&DNS{Query: "web.x.svc.cluster.local.", QType: "A", Response: true, RCode: "NOERROR", IPs: []string{"10.96.0.10", "10.96.0.11"}}},
		{"nxdomain", dnsPacket(t, webName, true, dnsmessage.RCodeNameError),
			&DNS{Query: "web.x.svc.cluster.local.", QType: "A", Response: true, RCode: "NXDOMAIN"}},
		{"answers cut off by the capture length", full[:len(full)-8],
			&DNS{Query: "web.x.svc.cluster.local.", QType: "A", Response: true, RCode: "NOERROR", IPs: []string{"10.96.0.10"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseDNS(c.payload)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("ParseDNS = %+v, want %+v", got, c.want)
			}
		})
	}
	if _, err := ParseDNS(full[:15]); err == nil {
		t.Error("ParseDNS of a payload shorter than header+question: no error")
	}
}
