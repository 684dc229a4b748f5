package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/sysdump"
)

func sysdumpCommand() *cobra.Command {
	var o sysdump.Options
	var kubeconfig string
	var dropsFor time.Duration
	cmd := &cobra.Command{
		Use:   "sysdump [--output FILE] [--kubeconfig FILE]",
		Short: "Collect everything a bug report needs (every node's status, config, maps, programs, logs, drops; the cluster objects myelin reads) into one .tar.gz, secrets redacted",
		Long: `Writes one .tar.gz: per node (nodes/<node>/) the agent's status, configuration with
the source of every key, Services, endpoints, NetworkPolicy state, drops seen during
--drops-for, the first --map-entries entries of every pinned BPF map, BPF programs and
links (bpftool), addresses and routes, and the end of the agent's log; and (cluster/)
the Nodes, Pods, Services, EndpointSlices, NetworkPolicies, NodeConfigs, Events,
kube-system DaemonSets and the myelin-config ConfigMap. Secrets are never read; values
that look like tokens, keys or passwords are replaced by [REDACTED]. manifest.json lists
every file and what could not be collected. Node data comes from the running lab's
agents (run as root); see docs/operations.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			paths := labplan.Paths{Dir: labplan.DefaultDir}
			if lab.Running(paths) {
				nodes, err := lab.SysdumpNodes(paths, dropsFor)
				if err != nil {
					return err
				}
				o.Nodes = nodes
				if kubeconfig == "" && os.Getenv("KUBECONFIG") == "" {
					kubeconfig = paths.Kubeconfig()
				}
			}
			dyn, err := dynamicClient(kubeconfig)
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "WARNING: no cluster objects: %v\n", err)
			}
			o.Dynamic = dyn
			return sysdump.Run(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.Output, "output", "o", "", "archive to write (default: myelin-sysdump-<UTC time>.tar.gz here)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG, the running lab's, ~/.kube/config)")
	f.IntVar(&o.MapEntries, "map-entries", 100, "entries kept of each BPF map")
	f.IntVar(&o.LogBytes, "log-bytes", 1<<20, "bytes kept of the end of each agent log")
	f.DurationVar(&dropsFor, "drops-for", 3*time.Second, "how long to collect drop events from each agent")
	return cmd
}

func dynamicClient(kubeconfig string) (dynamic.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w; name one with --kubeconfig", err)
	}
	cfg.UserAgent = "myelin-sysdump"
	return dynamic.NewForConfig(cfg)
}
