package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/myelin-net/myelin/internal/api"
)

// MonitorOptions are the flags of `myelin monitor`.
type MonitorOptions struct {
	Node, Socket, Type, Output string
}

// Monitor streams one agent's datapath events until ctx ends.
func Monitor(ctx context.Context, out io.Writer, o MonitorOptions) error {
	if o.Type != "" && o.Type != "drop" && o.Type != "trace" {
		return fmt.Errorf("--type %q: use drop or trace (or leave it out for both)", o.Type)
	}
	socks, err := sockets(o.Socket, o.Node, false)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	err = api.NewClient(socks[0]).Monitor(ctx, o.Type, func(ev api.Event) error {
		if o.Output == "json" {
			return enc.Encode(ev)
		}
		_, err := fmt.Fprintln(out, printable(formatEvent(ev)))
		return err
	})
	if err != nil {
		return escapedError{err} // the agent's text
	}
	return nil
}

func endpointText(ip string, port uint16, pod string) string {
	s := ip
	if port != 0 {
		s = fmt.Sprintf("%s:%d", ip, port)
	}
	if pod != "" {
		s += " (" + pod + ")"
	}
	return s
}

// formatEvent renders one event as a line, e.g.
// "02:31:07.123 drop DROP_NO_ROUTE from-pod 10.244.0.2:5353 (default/a) -> 10.9.9.9:53 UDP 74 bytes";
// NetworkPolicy drops add the side: "to-pod ingress".
func formatEvent(ev api.Event) string {
	ts := ev.Time.Format("15:04:05.000")
	if ev.Type == "lost" {
		return fmt.Sprintf("%s lost %d events (ring buffer full or this client too slow)", ts, ev.Lost)
	}
	dir := ev.Direction
	if ev.PolicyDirection != "" {
		dir += " " + ev.PolicyDirection // NetworkPolicy drops: which pod's policy
	}
	return fmt.Sprintf("%s %s %s %s %s -> %s %s %d bytes", ts, ev.Type, ev.Reason, dir,
		endpointText(ev.Src, ev.SrcPort, ev.SrcPod), endpointText(ev.Dst, ev.DstPort, ev.DstPod), ev.Proto, ev.Len)
}
