package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/connectivity"
	"github.com/myelin-net/myelin/internal/images"
	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labtools"
	"github.com/myelin-net/myelin/internal/version"
)

func connectivityCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "connectivity", Short: "Check a cluster's networking end to end with test pods"}
	cmd.AddCommand(connectivityTestCommand(), connectivityProbeCommand(), connectivityServeCommand())
	return cmd
}

func connectivityTestCommand() *cobra.Command {
	var o connectivity.Options
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "test [--kubeconfig FILE] [--external IP:PORT] [--keep]",
		Short: "Deploy client and server pods in a new namespace and check every path: pod to pod, Services, host, outside, DNS, MTU, fragments, NetworkPolicy",
		Long: `Deploys a namespace myelin-connectivity-<random> with client, server and host-network
pods, runs every scenario from inside the pods, prints one row per scenario with its
result and time, and deletes the namespace (--keep leaves it). Exits non-zero when a
scenario fails, naming the hop (from, to) and what was expected. See docs/connectivity.md.

Which cluster: --kubeconfig, else $KUBECONFIG, else the running lab's, else
~/.kube/config. On a lab with the lab runtime the pods run this machine's myelin binary
and the probes enter the pods' network namespaces (run as root); elsewhere the pods run
--image and the probes use pods/exec.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := connectivityTarget(kubeconfig, cmd.Flags().Changed("external"), &o); err != nil {
				return err
			}
			return connectivity.Run(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG, the running lab's, ~/.kube/config)")
	f.StringVar(&o.External, "external", "", "IP:PORT of an HTTP server outside the cluster for pod-to-outside (\"\" skips it); default: the lab's external host "+connectivity.DefaultExternal+" when the running lab is tested by default (no --kubeconfig or $KUBECONFIG), else skipped")
	f.StringVar(&o.Image, "image", "", "the pods' image, holding busybox and myelin (default: myelin/test:<version>)")
	f.StringVar(&o.Myelin, "myelin-path", "/usr/bin/myelin", "the myelin binary's path inside --image")
	f.StringVar(&o.Namespace, "namespace", "", "test namespace to create; must not exist (default: myelin-connectivity-<random>)")
	f.StringVar(&o.ClusterDomain, "cluster-domain", "cluster.local", "the cluster's DNS domain")
	f.BoolVar(&o.Keep, "keep", false, "leave the test namespace and its pods in place to inspect them")
	f.DurationVar(&o.Timeout, "timeout", time.Minute, "how long to wait for the pods and Services to be ready")
	f.StringSliceVar(&o.Only, "only", nil, "run only scenarios whose name contains one of these (e.g. pod-to-pod,dns)")
	f.StringSliceVar(&o.Skip, "skip", nil, "skip scenarios whose name contains one of these (reported as skipped)")
	return cmd
}

// connectivityTarget picks the cluster and how pods run and are probed: the running
// lab (lab.ConnectivityTarget) unless a kubeconfig is named. Pod-to-outside goes to
// the lab's external host on the lab unless externalSet (the user named one, or "").
func connectivityTarget(kubeconfig string, externalSet bool, o *connectivity.Options) error {
	image, myelinPath := o.Image, o.Myelin
	paths := labplan.Paths{Dir: labplan.DefaultDir}
	if kubeconfig == "" && os.Getenv("KUBECONFIG") == "" && lab.Running(paths) {
		kubeconfig = paths.Kubeconfig()
		if err := lab.ConnectivityTarget(paths, o); err != nil {
			return err
		}
		if !externalSet {
			o.External = connectivity.DefaultExternal
		}
	}
	if image != "" {
		o.Image, o.Myelin = image, myelinPath
	}
	if o.Image == "" {
		o.Image = images.Ref(images.Test, version.Version)
	}
	cfg, err := restConfig(kubeconfig, "myelin-connectivity")
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("make client: %w", err)
	}
	o.Client, o.REST = cs, cfg
	return nil
}

// connectivityServeCommand is the server connectivity test's pods run: lab serve's
// HTTP and UDP answers, without its check that it runs in a lab namespace (the test's
// host pod runs in a real node's network namespace, its purpose).
func connectivityServeCommand() *cobra.Command {
	var listen, name string
	cmd := &cobra.Command{
		Use:    "serve --listen ADDR --name NAME",
		Short:  "Serve the test pods' HTTP and UDP answers (what connectivity test runs in its pods)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return labtools.Serve(cmd.Context(), listen, name, 0)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", ":8080", "address to listen on")
	cmd.Flags().StringVar(&name, "name", "", "name to answer with")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

func connectivityProbeCommand() *cobra.Command {
	var o connectivity.ProbeOptions
	cmd := &cobra.Command{
		Use:    "probe http|dns|ping|udp-frag --to TARGET",
		Short:  "One exchange from inside a pod (what connectivity test runs in its pods)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Kind = args[0]
			return connectivity.Probe(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.To, "to", "", "http: URL; dns: server IP:PORT; ping: IP; udp-frag: IP:PORT of a myelin lab serve")
	f.StringVar(&o.Name, "name", "", "dns: the name to resolve")
	f.StringVar(&o.Expect, "expect", "", "dns: an address the answer must hold; http: text the body must hold")
	f.IntVar(&o.Size, "size", 0, "ping: payload bytes (0: the path MTU's worth); udp-frag: datagram bytes")
	f.BoolVar(&o.DF, "df", false, "ping: set Don't Fragment")
	f.DurationVar(&o.Timeout, "timeout", 3*time.Second, "give up after this long")
	return cmd
}
