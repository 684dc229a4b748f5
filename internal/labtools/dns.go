package labtools

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// ServeDNS runs a tiny DNS responder on UDP listen until ctx ends: every A question
// is answered with answer, anything else with NXDOMAIN. The lab has no cluster DNS;
// tests run this in a pod to make DNS traffic (flows with their question and answer).
func ServeDNS(ctx context.Context, listen string, answer netip.Addr) error {
	if !answer.Is4() {
		return fmt.Errorf("dns answer %v: must be an IPv4 address", answer)
	}
	conn, err := net.ListenPacket("udp", listen)
	if err != nil {
		return fmt.Errorf("serve DNS on %s: %w", listen, err)
	}
	return serveDNS(ctx, conn, answer)
}

// serveDNS answers on conn until ctx ends; it closes conn.
func serveDNS(ctx context.Context, conn net.PacketConn, answer netip.Addr) error {
	go func() {
		<-ctx.Done()
		conn.Close()
	}()
	buf := make([]byte, 512)
	for {
		n, addr, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("serve DNS on %s: %w", conn.LocalAddr(), err)
		}
		if reply, err := dnsAnswer(buf[:n], answer); err == nil {
			_, _ = conn.WriteTo(reply, addr)
		}
	}
}

// dnsAnswer builds the reply to query: its first question answered with a.
func dnsAnswer(query []byte, a netip.Addr) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, fmt.Errorf("parse dns query: %w", err)
	}
	q, err := p.Question()
	if err != nil {
		return nil, fmt.Errorf("parse dns question: %w", err)
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if q.Type != dnsmessage.TypeA {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if q.Type == dnsmessage.TypeA {
		if err := b.StartAnswers(); err != nil {
			return nil, err
		}
		if err := b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 30},
			dnsmessage.AResource{A: a.As4()}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// QueryDNS asks server (IP:PORT) for the A records of name and returns them.
func QueryDNS(ctx context.Context, server, name string, timeout time.Duration) ([]netip.Addr, error) {
	qn, err := dnsmessage.NewName(dnsName(name))
	if err != nil {
		return nil, fmt.Errorf("dns name %q: %w", name, err)
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: uint16(time.Now().UnixNano()), RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(dnsmessage.Question{Name: qn, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}); err != nil {
		return nil, err
	}
	msg, err := b.Finish()
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", server)
	if err != nil {
		return nil, fmt.Errorf("query DNS server %s: %w", server, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(msg); err != nil {
		return nil, fmt.Errorf("query DNS server %s: %w", server, err)
	}
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if err != nil {
		return nil, fmt.Errorf("query DNS server %s: no answer: %w", server, err)
	}
	return dnsAnswers(buf[:n])
}

func dnsName(name string) string {
	if name == "" || name[len(name)-1] != '.' {
		return name + "."
	}
	return name
}

func dnsAnswers(reply []byte) ([]netip.Addr, error) {
	var p dnsmessage.Parser
	if _, err := p.Start(reply); err != nil {
		return nil, fmt.Errorf("parse dns reply: %w", err)
	}
	if err := p.SkipAllQuestions(); err != nil {
		return nil, fmt.Errorf("parse dns reply: %w", err)
	}
	var out []netip.Addr
	for {
		h, err := p.AnswerHeader()
		if err != nil {
			return out, nil
		}
		if h.Type != dnsmessage.TypeA {
			if err := p.SkipAnswer(); err != nil {
				return out, nil
			}
			continue
		}
		r, err := p.AResource()
		if err != nil {
			return out, nil
		}
		out = append(out, netip.AddrFrom4(r.A))
	}
}
