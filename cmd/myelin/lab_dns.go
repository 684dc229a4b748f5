package main

import (
	"github.com/spf13/cobra"

	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

func labDNSCommand(paths func() labplan.Paths) *cobra.Command {
	wait := true
	cmd := &cobra.Command{
		Use:   "dns",
		Short: "Run cluster DNS in the lab: CoreDNS (built by make setup) as the kube-dns Service at the kubelets' clusterDNS (10.96.0.10)",
		Long: `Runs CoreDNS as the Deployment kube-system/coredns behind the Service kube-system/kube-dns,
as kubeadm clusters do. On --runtime containerd the pods run the image myelin/coredns
(make images builds it with --e2e) and pods resolve through it (the kubelets' clusterDNS);
on the lab runtime the pods run the host's CoreDNS binary and clients query 10.96.0.10
directly (lab pods share the host's /etc/resolv.conf). Safe to run again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lab.InstallDNS(cmd.Context(), paths(), wait, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", wait, "wait for a ready CoreDNS replica (with --cni none, install a CNI first or pass --wait=false)")
	return cmd
}

func labImportCommand(paths func() labplan.Paths) *cobra.Command {
	return &cobra.Command{
		Use:   "import ARCHIVE...",
		Short: "Import image archives (docker save format) into every node's containerd (--runtime containerd)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			plan, err := lab.LoadPlan(paths())
			if err != nil {
				return err
			}
			return lab.ImportArchives(cmd.Context(), paths(), plan, args...)
		},
	}
}
