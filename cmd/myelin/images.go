package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/myelin-net/myelin/internal/images"
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
			return images.Build(o, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&o.BinDir, "bin", "", "directory of the static myelin binaries (default: this binary's)")
	cmd.Flags().StringVar(&o.Cache, "cache", o.Cache, "tool cache; archives go to <cache>/images/<version>/")
	cmd.Flags().StringVar(&o.Version, "version", o.Version, "tag of the images")
	cmd.Flags().BoolVar(&o.Force, "force", false, "rebuild archives that exist")
	return cmd
}
