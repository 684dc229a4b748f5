// Command myelin is the operator's CLI: the lab today; status, monitor, config and bench
// as the agent lands. Each subcommand parses its flags and calls one function of an
// internal package.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "myelin",
		Short:         "myelin: Kubernetes networking with an eBPF datapath",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Version,
	}
	root.AddCommand(labCommand(), statusCommand(), monitorCommand(), configCommand(), servicesCommand(), benchCommand(),
		versionCommand(), imagesCommand(), endpointsCommand(), policyCommand(), observeCommand())
	root.AddCommand(relayCommand(), uiCommand(), connectivityCommand(), sysdumpCommand(), healthCommand())
	root.AddCommand(scaleCommand())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "myelin: %v\n", err)
		if lab.Refused(err) {
			os.Exit(lab.ExitRefused)
		}
		os.Exit(1)
	}
}
