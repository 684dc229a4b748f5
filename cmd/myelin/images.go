package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/myelin-net/myelin/internal/images"
	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/version"
)

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print myelin's version (also the tag of its images)",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), version.Version)
		},
	}
}

func imagesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "images",
		Short: "The images a lab with real nodes runs (built locally; no registry)",
	}
	cmd.AddCommand(imagesBuildCommand())
	return cmd
}

func imagesBuildCommand() *cobra.Command {
	o := images.Options{Cache: cni.ToolCache(), Version: version.Version}
	var e2e bool
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build myelin/agent, myelin/pause and myelin/test tagged with this version as archives in the tool cache (make images)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.BinDir == "" {
				self, err := os.Executable()
				if err != nil {
					return err
				}
				o.BinDir = filepath.Dir(self)
			}
			if err := images.Build(o, cmd.OutOrStdout()); err != nil || !e2e {
				return err
			}
			return images.BuildE2E(images.E2EOptions{Cache: o.Cache, KubeBin: lab.KubeBinDir(), CoreDNS: lab.CoreDNSBin(),
				BinDir: o.BinDir, Busybox: o.Busybox, Force: o.Force}, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&e2e, "e2e", false, "also build the upstream e2e suite's images ("+strings.Join(images.E2ENames, ", ")+" under "+images.E2ERegistry+") and "+images.CoreDNSImage+" from what make setup built (scripts/build-e2e.sh)")
	cmd.Flags().StringVar(&o.BinDir, "bin", "", "directory of the static myelin binaries (default: this binary's)")
	cmd.Flags().StringVar(&o.Cache, "cache", o.Cache, "tool cache; archives go to <cache>/images/<version>/")
	cmd.Flags().StringVar(&o.Version, "version", o.Version, "tag of the images")
	cmd.Flags().BoolVar(&o.Force, "force", false, "rebuild archives that exist")
	return cmd
}
