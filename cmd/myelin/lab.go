package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/cni/flannel"
	"github.com/myelin-net/myelin/internal/lab/kubelet"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labtools"
	"github.com/myelin-net/myelin/internal/netns"
)

func labCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "A real Kubernetes cluster on this machine, with network namespaces as nodes",
		Long: `The lab runs etcd, kube-apiserver, kube-controller-manager and kube-scheduler
(built by make setup) and one lab kubelet per node. Each node is a network namespace
(myelin-node-N) on an underlay bridge in myelin-lab-net; myelin-lab-ext is an external
host serving HTTP on 203.0.113.10:80. Everything it creates is named myelin-*.

--dir is the lab's own directory: lab up marks it (.myelin-lab) and lab down removes
it. It is made absolute; /, a top-level directory (/tmp, /run, /home, …), /var/lib,
/var/tmp, /var/log, /var/run, /usr/local, /run/user and your home (or a directory
above it) are refused. lab up, down and restart hold /run/myelin-lab.lock while they
run, one lock for the machine whatever --dir says: a second one fails at once.`,
	}
	cmd.PersistentFlags().StringVar(&dir, "dir", labplan.DefaultDir,
		"lab directory (state, certificates, logs; lab down removes it): made absolute; not /, a top-level directory such as /tmp, or your home")
	// --dir is checked once, here, before any lab command runs: lab down removes the
	// directory and what runs from it (labplan.CheckDir says which are refused).
	var checked labplan.Paths
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error {
		p, err := labplan.NewPaths(dir)
		if err != nil {
			return fmt.Errorf("--dir %q: %w", dir, err)
		}
		checked = p
		return nil
	}
	paths := func() labplan.Paths { return checked }
	cmd.AddCommand(labUpCommand(paths), labDownCommand(paths), labStatusCommand(paths),
		labExecCommand(paths), labRestartCommand(paths), labServeCommand(), labUDPFlowsCommand(), labBigUDPCommand(), labHTTPSessionCommand(), labSYNFloodCommand(paths), labDNSToolCommand(), labPeerCommand(), labSuperviseCommand(paths), labKubeletCommand(paths), labNodeNetworkCommand(paths))
	cmd.AddCommand(labDNSCommand(paths), labImportCommand(paths))
	return cmd
}

// labTrafficTool refuses to run a lab traffic tool (serve, udp-flows, udp-big,
// http-session, syn-flood, dnstool serve and query, peer) in the machine's own network
// namespace: there its packets would follow the machine's routes off the machine, and
// its servers would answer the machine's networks. They run inside the lab's
// namespaces (myelin lab exec, ip netns exec myelin-…), where only the lab is.
func labTrafficTool(cmd *cobra.Command, _ []string) error {
	name := cmd.Name()
	if p := cmd.Parent(); p != nil && p.Name() != "lab" {
		name = p.Name() + " " + name // dnstool serve
	}
	machine, err := netns.IsMachine()
	if err != nil {
		return fmt.Errorf("myelin lab %s: %w; it runs only inside the lab's network namespaces", name, err)
	}
	if machine {
		return fmt.Errorf("myelin lab %s: refused in the machine's network namespace, where its packets could leave the machine; "+
			"run it in a lab namespace: myelin lab exec POD -- myelin lab %s …, or ip netns exec %s myelin lab %s …",
			name, name, labplan.ExtNS, name)
	}
	return nil
}

// labToolTimeoutMax bounds a traffic tool's --timeout: load generators stop by themselves.
const labToolTimeoutMax = 5 * time.Minute

func checkToolTimeout(timeout time.Duration) error {
	return checkToolDuration("--timeout", timeout)
}

// checkToolDuration refuses a traffic tool's flag that would keep it running past
// labToolTimeoutMax (or not at all).
func checkToolDuration(flag string, d time.Duration) error {
	if d <= 0 || d > labToolTimeoutMax {
		return fmt.Errorf("%s %v: must be above 0 and at most %v (lab traffic tools stop by themselves)", flag, d, labToolTimeoutMax)
	}
	return nil
}

// checkSession refuses an http-session that would run past labtools.SessionMax:
// --count requests --interval apart (--count 0 stops at SessionMax by itself).
func checkSession(count int, interval time.Duration) error {
	if count < 0 || count > 10000 {
		return fmt.Errorf("--count %d: must be between 1 and 10000, or 0 to send until stopped", count)
	}
	if interval < 0 || interval > labtools.SessionMax {
		return fmt.Errorf("--interval %v: must be between 0 and %v", interval, labtools.SessionMax)
	}
	if total := time.Duration(count) * interval; total > labtools.SessionMax {
		return fmt.Errorf("--count %d --interval %v: would send for %v, at most %v (lab traffic tools stop by themselves)",
			count, interval, total, labtools.SessionMax)
	}
	return nil
}

// checkSYNFlood refuses a --rate that is negative or that would stretch --count SYNs
// past labToolTimeoutMax.
func checkSYNFlood(count, rate int) error {
	if rate < 0 {
		return fmt.Errorf("--rate %d: must be 0 (as fast as possible) or a number of packets per second", rate)
	}
	if rate > 0 && time.Duration(count)*time.Second/time.Duration(rate) > labToolTimeoutMax {
		return fmt.Errorf("--count %d --rate %d: would flood for %v, at most %v (lab traffic tools stop by themselves)",
			count, rate, time.Duration(count)*time.Second/time.Duration(rate), labToolTimeoutMax)
	}
	return nil
}

func labUpCommand(paths func() labplan.Paths) *cobra.Command {
	o := labplan.DefaultOptions()
	var cni, underlay, runtime string
	var fresh bool
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Build the lab and wait until every node is Ready (does nothing if the same lab is running; refuses if another one is)",
		Long: `Build the lab and wait until every node is Ready. On a running lab of the same
options it does nothing (safe to repeat); a running lab of other options is refused.
--new refuses any running lab: for scripts that take the lab down when they finish.
Exit status 3 means lab up refused before building anything (not root, another lab
up, down or restart running, a lab running, a failed check): nothing to remove.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.CNI, o.Underlay, o.Runtime = labplan.CNI(cni), labplan.Underlay(underlay), labplan.Runtime(runtime)
			plan, err := labplan.NewPlan(o, labplan.DefaultAddressing())
			if err != nil {
				return err
			}
			return lab.Up(cmd.Context(), paths(), plan, fresh, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&fresh, "new", false, "refuse a running lab of any options instead of using it (for scripts that take down what they bring up)")
	cmd.Flags().IntVar(&o.Nodes, "nodes", o.Nodes, fmt.Sprintf("number of nodes (1-%d)", labplan.MaxNodes))
	cmd.Flags().StringVar(&cni, "cni", string(o.CNI), "network plugin: myelin, bridge (Debian's reference bridge + host-local), flannel (Flannel "+flannel.Version+" with etcd, and bridge + host-local) or none (with --runtime containerd: nodes stay NotReady until a CNI is installed, e.g. by Helm)")
	cmd.Flags().StringVar(&runtime, "runtime", string(labplan.RuntimeLab), "what runs the pods: lab (the lab kubelet: pods are processes; fast) or containerd (kubelet "+lab.KubeVersion+" with containerd + runc: pods are containers from the images of make images)")
	cmd.Flags().StringVar(&o.FlannelBackend, "flannel-backend", "", "with --cni flannel: flannel's backend, "+strings.Join(labplan.FlannelBackends, " or ")+" (default "+labplan.FlannelBackends[0]+")")
	cmd.Flags().StringVar(&o.Profile, "profile", o.Profile, "myelin configuration profile: native, native-legacy, tunnel, tunnel-legacy")
	cmd.Flags().StringVar(&o.KubeProxy, "kube-proxy", "", "run kube-proxy on every node in this mode (iptables or nftables) and set kube-proxy-replacement to false; default: none, myelin serves Services")
	cmd.Flags().StringVar(&underlay, "underlay", string(o.Underlay), "node network: l2 (one segment) or l3 (two segments behind a router)")
	return cmd
}

func labDownCommand(paths func() labplan.Paths) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Remove everything the lab made (processes, namespaces, links, pins, files); safe to repeat",
		Long: `Remove everything the lab made (processes, namespaces, links, pins, files); safe to
repeat, and after a crash. It removes --dir only when lab up marked it (.myelin-lab) or
it is empty; a directory with other files is left alone, with what runs from it, and
lab down removes only what it finds by name (myelin-* namespaces and links, the nodes'
cgroups) and says why.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return fmt.Errorf("myelin lab down must run as root; run it with sudo")
			}
			if err := lab.Down(paths(), cmd.OutOrStdout()); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "the lab is down; nothing named myelin-* is left")
			return nil
		},
	}
}

func labStatusCommand(paths func() labplan.Paths) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the lab: options, processes, nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lab.PrintStatus(cmd.Context(), paths(), cmd.OutOrStdout())
		},
	}
}

func labExecCommand(paths func() labplan.Paths) *cobra.Command {
	var namespace string
	cmd := &cobra.Command{
		Use:   "exec POD [-n NAMESPACE] -- COMMAND [ARGS...]",
		Short: "Run a host command inside a pod's network namespace",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return lab.Exec(cmd.Context(), paths(), namespace, args[0], args[1:])
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "default", "the pod's namespace")
	return cmd
}

func labRestartCommand(paths func() labplan.Paths) *cobra.Command {
	var kill bool
	cmd := &cobra.Command{
		Use:   "restart PROCESS",
		Short: "Restart one lab process (e.g. agent-myelin-node-2) and wait until it runs again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return lab.Restart(paths(), args[0], kill)
		},
	}
	cmd.Flags().BoolVar(&kill, "kill", false, "SIGKILL instead of SIGTERM (simulates a crash)")
	return cmd
}

func labServeCommand() *cobra.Command {
	var listen, name string
	var drain time.Duration
	cmd := &cobra.Command{
		Use:     "serve",
		Short:   "Serve HTTP, answering with the server's name and the client address it saw (in a lab namespace only)",
		Args:    cobra.NoArgs,
		PreRunE: labTrafficTool,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				name = os.Getenv("POD_NAME")
			}
			return labtools.Serve(cmd.Context(), listen, name, drain)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", ":8080", "address to listen on")
	cmd.Flags().StringVar(&name, "name", "", "name to answer with (default: $POD_NAME)")
	cmd.Flags().DurationVar(&drain, "drain", 0, "on SIGTERM keep serving this long before shutting down (like a preStop delay)")
	return cmd
}

func labUDPFlowsCommand() *cobra.Command {
	var to string
	var flows, firstPort int
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:     "udp-flows --to IP:PORT [--flows N] [--first-port PORT]",
		Short:   "Open N concurrent UDP flows to a lab serve endpoint and report replies and the sources it saw (JSON)",
		Args:    cobra.NoArgs,
		PreRunE: labTrafficTool,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if flows < 1 || flows > 20000 {
				return fmt.Errorf("--flows %d: must be between 1 and 20000", flows)
			}
			if firstPort != 0 && (firstPort < 1024 || firstPort+flows-1 > 65535) {
				return fmt.Errorf("--first-port %d: the flows' ports %d-%d must be within 1024-65535 (0: the kernel picks them)",
					firstPort, firstPort, firstPort+flows-1)
			}
			if err := checkToolTimeout(timeout); err != nil {
				return err
			}
			res, err := labtools.UDPFlows(cmd.Context(), to, flows, firstPort, timeout)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "target IP:PORT (a myelin lab serve endpoint)")
	cmd.Flags().IntVar(&flows, "flows", 1000, "number of concurrent flows")
	cmd.Flags().IntVar(&firstPort, "first-port", 0, "local port of the first flow, the others' follow it (0: the kernel picks them)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for replies")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func labBigUDPCommand() *cobra.Command {
	var to string
	var send, reply int
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:     "udp-big --to IP:PORT [--send BYTES] [--reply BYTES]",
		Short:   "Send one large UDP datagram to a lab serve endpoint, ask for a large reply, and report whether both arrived whole (JSON)",
		Args:    cobra.NoArgs,
		PreRunE: labTrafficTool,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkToolTimeout(timeout); err != nil {
				return err
			}
			res, err := labtools.BigUDP(cmd.Context(), to, send, reply, timeout)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "target IP:PORT (a myelin lab serve endpoint)")
	cmd.Flags().IntVar(&send, "send", 3000, "bytes of the request datagram (larger than the MTU: sent as fragments)")
	cmd.Flags().IntVar(&reply, "reply", 6000, "bytes of the reply datagram to ask for (at most twice --send: servers don't amplify)")
	cmd.Flags().DurationVar(&timeout, "timeout", 6*time.Second, "how long to wait for the reply")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func labHTTPSessionCommand() *cobra.Command {
	var to string
	var localPort, count int
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "http-session --to IP:PORT [--local-port P] [--count N] [--interval D]",
		Short: "Send N HTTP requests over one TCP connection to a lab serve endpoint and report the answers (JSON); fails unless all are answered",
		Long: "Send N HTTP requests over one TCP connection to a lab serve endpoint and report the answers\n" +
			"(JSON); fails unless all are answered. With --count 0 it sends until SIGTERM or SIGINT\n" +
			"(at most 10 minutes), then reports: a connection held open across an upgrade.",
		Args:    cobra.NoArgs,
		PreRunE: labTrafficTool,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkSession(count, interval); err != nil {
				return err
			}
			res := labtools.HTTPSession(cmd.Context(), to, localPort, count, interval)
			if err := json.NewEncoder(cmd.OutOrStdout()).Encode(res); err != nil {
				return err
			}
			if res.Error != "" {
				return fmt.Errorf("http-session: %s", res.Error)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "target IP:PORT (a myelin lab serve endpoint)")
	cmd.Flags().IntVar(&localPort, "local-port", 0, "bind this local port (0: the kernel picks one)")
	cmd.Flags().IntVar(&count, "count", 5, "requests to send (0: until SIGTERM/SIGINT, at most 10 minutes)")
	cmd.Flags().DurationVar(&interval, "interval", 500*time.Millisecond, "pause between requests (count × interval at most 10 minutes)")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func labSYNFloodCommand(paths func() labplan.Paths) *cobra.Command {
	var to, from string
	var count, rate int
	cmd := &cobra.Command{
		Use:     "syn-flood --to IP:PORT --from CIDR [--count N] [--rate PPS]",
		Short:   "Send N TCP SYNs from forged sources of CIDR to a lab node or pod (the attacker of the NodePort flood test; the running lab's node and pod addresses only)",
		Args:    cobra.NoArgs,
		PreRunE: labTrafficTool,
		RunE: func(cmd *cobra.Command, _ []string) error {
			target, err := netip.ParseAddrPort(to)
			if err != nil {
				return fmt.Errorf("--to %q: want IP:PORT", to)
			}
			src, err := netip.ParsePrefix(from)
			if err != nil {
				return fmt.Errorf("--from %q: want a CIDR", from)
			}
			if err := checkSYNFlood(count, rate); err != nil {
				return err
			}
			plan, err := lab.LoadPlan(paths())
			if err != nil {
				return fmt.Errorf("syn-flood: read the lab's plan for its node and pod addresses: %w", err)
			}
			res, err := labtools.SYNFlood(target, src, count, rate, plan.FloodTargets())
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "target IP:PORT: a node's address or a pod's of the running lab (not the machine's 198.18.0.2, the control plane or the router)")
	cmd.Flags().StringVar(&from, "from", "203.0.113.0/24", "forged sources: a CIDR inside 203.0.113.0/24")
	cmd.Flags().IntVar(&count, "count", 50000, fmt.Sprintf("SYNs to send (at most %d)", labtools.SYNFloodMax))
	cmd.Flags().IntVar(&rate, "rate", 0, "packets per second (0: as fast as possible; count/rate at most 5 minutes)")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func labSuperviseCommand(paths func() labplan.Paths) *cobra.Command {
	return &cobra.Command{
		Use:    "supervise",
		Short:  "Run and restart the lab's processes (started by lab up)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lab.Supervise(cmd.Context(), paths())
		},
	}
}

func labKubeletCommand(paths func() labplan.Paths) *cobra.Command {
	return labNodeProcessCommand("kubelet", "Run the lab kubelet of one node (started by the lab supervisor in the node's netns)",
		func(ctx context.Context, plan labplan.Plan, n labplan.Node, log *slog.Logger) error {
			return kubelet.Run(ctx, kubelet.Config{Node: n, Plan: plan, Paths: paths()}, log)
		}, paths)
}

func labNodeNetworkCommand(paths func() labplan.Paths) *cobra.Command {
	return labNodeProcessCommand("node-network", "Run the lab CNI's node network of one node (started by the lab supervisor in the node's netns on --runtime containerd)",
		func(ctx context.Context, plan labplan.Plan, n labplan.Node, log *slog.Logger) error {
			return lab.RunNodeNetwork(ctx, paths(), plan, n, log)
		}, paths)
}

// labNodeProcessCommand is a hidden command the lab supervisor runs per node (--node):
// it loads the lab's plan, finds the node and runs run with a logger naming it.
func labNodeProcessCommand(use, short string, run func(context.Context, labplan.Plan, labplan.Node, *slog.Logger) error,
	paths func() labplan.Paths) *cobra.Command {
	var node string
	cmd := &cobra.Command{
		Use:    use,
		Short:  short,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			plan, err := lab.LoadPlan(paths())
			if err != nil {
				return err
			}
			n, ok := plan.Node(node)
			if !ok {
				return fmt.Errorf("--node %q: not a node of this lab", node)
			}
			return run(cmd.Context(), plan, n, slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", node))
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "node name")
	return cmd
}
