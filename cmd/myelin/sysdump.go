package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/podexec"
	"github.com/myelin-net/myelin/internal/sysdump"
)

func sysdumpCommand() *cobra.Command {
	var o sysdump.Options
	var kubeconfig string
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
agents (run as root), or on a cluster from the chart's agent pods through pods/exec;
see docs/operations.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSysdump(cmd, kubeconfig, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.Output, "output", "o", "", "archive to write (default: myelin-sysdump-<UTC time>.tar.gz here)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG, the running lab's, ~/.kube/config)")
	f.IntVar(&o.MapEntries, "map-entries", sysdump.DefaultMapEntries, "entries kept of each BPF map (0: only how many it holds)")
	f.IntVar(&o.LogBytes, "log-bytes", sysdump.DefaultLogBytes, "bytes kept of the end of each agent log (1 or more)")
	f.DurationVar(&o.DropsFor, "drops-for", sysdump.DefaultDropsFor,
		fmt.Sprintf("how long to collect drop events from each agent, in turn (at most %v)", sysdump.MaxDropsFor))
	cmd.AddCommand(sysdumpAgentCommands()...)
	return cmd
}

// runSysdump picks the nodes: the running lab's agent processes (--cni myelin), else
// the chart's agent pods through pods/exec.
func runSysdump(cmd *cobra.Command, kubeconfig string, o sysdump.Options) error {
	if err := sysdump.CheckFlags(o.MapEntries, o.LogBytes, o.DropsFor); err != nil {
		return err
	}
	paths := labplan.Paths{Dir: labplan.DefaultDir}
	if lab.Running(paths) {
		nodes, err := lab.SysdumpNodes(paths, o.DropsFor)
		if err != nil {
			return err
		}
		o.Nodes = nodes
		if kubeconfig == "" && os.Getenv("KUBECONFIG") == "" {
			kubeconfig = paths.Kubeconfig()
		}
	}
	cfg, err := restConfig(kubeconfig, "myelin-sysdump")
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "WARNING: no cluster objects and no agent pods: %v\n", err)
		return sysdump.Run(cmd.Context(), cmd.OutOrStdout(), o)
	}
	if o.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return fmt.Errorf("make client: %w", err)
	}
	if o.Nodes == nil {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("make client: %w", err)
		}
		o.Nodes, err = sysdump.PodNodes(cmd.Context(), cs, podexec.API{Client: cs, Config: cfg}, o.DropsFor)
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "WARNING: no node data: %v\n", err)
		}
	}
	return sysdump.Run(cmd.Context(), cmd.OutOrStdout(), o)
}

// sysdumpAgentCommands are what `myelin sysdump` runs in an agent's container on a
// real cluster (hidden): one agent view, its drops, its pinned maps.
func sysdumpAgentCommands() []*cobra.Command {
	agent := &cobra.Command{
		Use: "agent VIEW", Hidden: true, Args: cobra.ExactArgs(1),
		Short: "Print one view of this node's agent as JSON (status, config, services, endpoints, policy)",
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := sysdump.AgentView(cmd.Context(), api.NewClient(sysdump.LocalSocket()), args[0])
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(v)
		},
	}
	var dropsFor time.Duration
	drops := &cobra.Command{
		Use: "drops", Hidden: true, Args: cobra.NoArgs, Short: "Print this node's agent's drop events for --for",
		RunE: func(cmd *cobra.Command, _ []string) error {
			out, err := sysdump.AgentDrops(cmd.Context(), api.NewClient(sysdump.LocalSocket()), dropsFor)
			cmd.OutOrStdout().Write(out)
			return err
		},
	}
	drops.Flags().DurationVar(&dropsFor, "for", 3*time.Second, "how long to listen")
	var dir string
	var maxEntries int
	maps := &cobra.Command{
		Use: "maps", Hidden: true, Args: cobra.NoArgs, Short: "Print the first --max entries of every pinned map as JSON (hex)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				dir = sysdump.LocalPinDir()
			}
			m, err := sysdump.DumpPinnedMaps(dir, maxEntries)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(m)
		},
	}
	maps.Flags().StringVar(&dir, "dir", "", "pin directory (default: the agent's --bpffs-dir)")
	maps.Flags().IntVar(&maxEntries, "max", sysdump.DefaultMapEntries, "entries kept of each map")
	bpf := &cobra.Command{
		Use: "bpf", Hidden: true, Args: cobra.NoArgs, Short: "Print the kernel's myelin BPF programs and its BPF links as JSON",
		RunE: func(cmd *cobra.Command, _ []string) error {
			objs, err := sysdump.ListBPFObjects()
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(objs)
		},
	}
	return []*cobra.Command{agent, drops, maps, bpf}
}

func restConfig(kubeconfig, agent string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w; name one with --kubeconfig", err)
	}
	cfg.UserAgent = agent
	return cfg, nil
}
