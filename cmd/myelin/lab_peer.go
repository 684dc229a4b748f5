package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/myelin-net/myelin/internal/labtools"
)

func labPeerCommand() *cobra.Command {
	var to, proto string
	var timeout, untilClosed time.Duration
	cmd := &cobra.Command{
		Use:     "peer --to IP:PORT [--proto tcp|udp-connected|udp]",
		Short:   "Talk once to a lab serve endpoint and print the peer address the socket shows (getpeername, or the reply's source) and who answered (JSON)",
		Args:    cobra.NoArgs,
		PreRunE: labTrafficTool,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkToolTimeout(timeout); err != nil {
				return err
			}
			if untilClosed != 0 {
				if proto != "udp-connected" {
					return fmt.Errorf("--until-closed with --proto %s: it keeps a connected UDP socket; use --proto udp-connected", proto)
				}
				if err := checkToolDuration("--until-closed", untilClosed); err != nil {
					return err
				}
			}
			var res labtools.PeerResult
			var err error
			if untilClosed == 0 {
				res, err = labtools.Peer(cmd.Context(), to, proto, timeout)
			} else {
				res, err = labtools.PeerUntilClosed(cmd.Context(), to, untilClosed, func(r labtools.PeerResult) {
					fmt.Fprintf(cmd.OutOrStdout(), "answered peer=%s %s\n", r.Peer, r.Answer)
				})
			}
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "target IP:PORT (a myelin lab serve endpoint, or a Service in front of some)")
	cmd.Flags().StringVar(&proto, "proto", "tcp", "tcp, udp-connected (connect() then send) or udp (sendto/recvfrom)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for the answer")
	cmd.Flags().DurationVar(&untilClosed, "until-closed", 0, "over connected UDP: then keep the socket until the kernel closes it (ECONNABORTED), at most this long, 5 minutes or less (a backend that went away, with socket-LB)")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}
