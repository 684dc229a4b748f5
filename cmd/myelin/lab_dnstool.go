package main

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/cobra"

	"github.com/myelin-net/myelin/internal/labtools"
)

// labDNSToolCommand: a tiny DNS responder and client for lab tests (DNS flows with a
// known answer; `lab dns` runs the cluster DNS).
func labDNSToolCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dnstool",
		Short: "A tiny DNS responder and client for lab tests (DNS flows; in a lab namespace only)",
	}
	var listen, answer string
	serve := &cobra.Command{
		Use:     "serve [--listen :53] [--answer IP]",
		Short:   "Answer every A question with --answer, others with NXDOMAIN",
		Args:    cobra.NoArgs,
		PreRunE: labTrafficTool,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := netip.ParseAddr(answer)
			if err != nil {
				return fmt.Errorf("--answer %q: must be an IPv4 address", answer)
			}
			return labtools.ServeDNS(cmd.Context(), listen, a)
		},
	}
	serve.Flags().StringVar(&listen, "listen", ":53", "UDP address to listen on")
	serve.Flags().StringVar(&answer, "answer", "198.51.100.53", "the address every A question gets")
	var server string
	var timeout time.Duration
	query := &cobra.Command{
		Use:     "query --server IP:PORT NAME",
		Short:   "Ask --server for the A records of NAME and print them",
		Args:    cobra.ExactArgs(1),
		PreRunE: labTrafficTool,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkToolTimeout(timeout); err != nil {
				return err
			}
			ips, err := labtools.QueryDNS(cmd.Context(), server, args[0], timeout)
			if err != nil {
				return err
			}
			for _, ip := range ips {
				fmt.Fprintln(cmd.OutOrStdout(), ip)
			}
			return nil
		},
	}
	query.Flags().StringVar(&server, "server", "", "the DNS server, IP:PORT")
	query.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	_ = query.MarkFlagRequired("server")
	cmd.AddCommand(serve, query)
	return cmd
}
