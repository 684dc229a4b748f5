package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/flowclient"
)

// defaultLast is how many stored flows observe shows without --last or --follow (as hubble).
const defaultLast = 20

// ObserveOptions are the flags of `myelin observe`.
type ObserveOptions struct {
	flowclient.Options
	Last   int
	Follow bool
	Output string // "table" (default) or "json"
	Socket string // one agent; default every agent on this machine (every lab node)
	Stderr io.Writer
}

// Observe prints the flows of every agent this machine reaches, merged by time: the
// newest stored ones, then with Follow new ones until ctx ends.
func Observe(ctx context.Context, out io.Writer, o ObserveOptions) error {
	if o.Output != "" && o.Output != "table" && o.Output != "json" {
		return fmt.Errorf("-o %q: use table or json", o.Output)
	}
	last := o.Last
	if last == 0 && !o.Follow {
		last = defaultLast
	}
	req, err := o.Options.Request(last, o.Follow)
	if err != nil {
		return err
	}
	socks, err := sockets(o.Socket, "", o.Socket == "")
	if err != nil {
		return err
	}
	src := flowclient.NewAgentsSource(socks)
	if o.Stderr != nil {
		src.OnError = func(sock string, err error) {
			fmt.Fprintf(o.Stderr, "myelin observe: %s: %s\n", sock, printable(err.Error()))
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan *flow.Flow, 256)
	errc := make(chan error, 1)
	go func() {
		errc <- src.Flows(ctx, req, ch)
		close(ch)
	}()
	enc := json.NewEncoder(out)
	if o.Output != "json" {
		fmt.Fprintln(out, observeHeader)
	}
	for f := range ch {
		var werr error
		if o.Output == "json" {
			werr = enc.Encode(f)
		} else {
			_, werr = fmt.Fprintln(out, FormatFlow(f))
		}
		if werr != nil {
			cancel()
		}
	}
	if err := <-errc; err != nil {
		return escapedError{err} // the agents' text
	}
	return nil
}

const observeHeader = "TIME          NODE            SOURCE                                   DESTINATION                              TYPE           VERDICT    SUMMARY"

// FormatFlow renders one flow as a table row. Every text column goes through
// printable: a flow carries text a pod chose.
func FormatFlow(f *flow.Flow) string {
	ts := f.Time.Format("15:04:05.000")
	if f.Type == flow.TypeLost {
		return fmt.Sprintf("%-13s %-15s lost %d flows (this reader was too slow, or the node's flow ring was full)", ts, printable(f.Node), f.Lost)
	}
	return fmt.Sprintf("%-13s %-15s %-40s %-40s %-14s %-10s %s", ts, printable(f.Node),
		flowEndpoint(f.Source, f.SrcPort), flowEndpoint(f.Destination, f.DstPort),
		printable(string(f.Type)), printable(string(f.Verdict)), flowSummary(f))
}

func flowEndpoint(ep flow.Endpoint, port uint16) string {
	s := printable(ep.IP)
	if ep.Pod != "" {
		s = printable(ep.Namespace + "/" + ep.Pod)
	}
	if port != 0 {
		s = fmt.Sprintf("%s:%d", s, port)
	}
	return s
}

// flowSummary: protocol, TCP flags or ICMP type, drop reason, Service, DNS question.
func flowSummary(f *flow.Flow) string {
	parts := []string{printable(f.Protocol)}
	if t := f.TCPFlags; t != nil {
		var flags []string
		for _, fl := range []struct {
			on   bool
			name string
		}{{t.SYN, "SYN"}, {t.ACK, "ACK"}, {t.FIN, "FIN"}, {t.RST, "RST"}, {t.PSH, "PSH"}} {
			if fl.on {
				flags = append(flags, fl.name)
			}
		}
		parts = append(parts, "Flags:"+strings.Join(flags, ","))
	}
	if f.Protocol == "ICMP" {
		parts = append(parts, fmt.Sprintf("type %d code %d", f.ICMPType, f.ICMPCode))
	}
	if f.DropReason != "" {
		parts = append(parts, printable(f.DropReason))
	}
	if f.Service != "" {
		parts = append(parts, "service "+printable(f.Service))
	}
	if f.DNS != nil {
		d := f.DNS
		q := "query " + printable(d.Query) + " " + printable(d.QType)
		if d.Response {
			q = "response " + printable(d.Query) + " " + printable(d.RCode) + " " + printable(strings.Join(d.IPs, ","))
		}
		parts = append(parts, "DNS "+strings.TrimSpace(q))
	}
	if f.Packets > 0 {
		parts = append(parts, fmt.Sprintf("%d packets %d bytes", f.Packets, f.Bytes))
	}
	return strings.Join(parts, " ")
}
