package lab

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/k8s"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// PrintStatus writes a one-screen summary of the lab: its plan, processes and nodes.
func PrintStatus(ctx context.Context, paths labplan.Paths, out io.Writer) error {
	var r record
	if err := readJSON(paths.PlanFile(), &r); err != nil {
		if len(LeftoverNetNS()) > 0 {
			return fmt.Errorf("no lab record in %s but lab namespaces exist (%s); clean up with: myelin lab down",
				paths.Dir, strings.Join(LeftoverNetNS(), ", "))
		}
		return ErrNoLab
	}
	plan := r.Plan
	st, _ := LoadState(paths)
	phase := string(st.Phase)
	if !Running(paths) {
		phase = "stopped (supervisor not running; run myelin lab down, then myelin lab up)"
	}
	fmt.Fprintf(out, "Lab:        %s, up %v\n", phase, time.Since(r.Created).Round(time.Second))
	fmt.Fprintf(out, "Options:    %s\n", plan.Options.Flags())
	fmt.Fprintf(out, "Apiserver:  https://%s:%d (kubeconfig %s)\n", plan.Addressing.ControlPlaneIP(), labplan.APIServerPort, paths.Kubeconfig())
	fmt.Fprintf(out, "External:   http://%s:%d (netns %s)\n", plan.Addressing.ExternalServerIP(), labplan.ExternalHTTPPort, labplan.ExtNS)
	if st.Error != "" {
		fmt.Fprintf(out, "Error:      %s\n", st.Error)
	}

	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nPROCESS\tPID\tSTATE\tRESTARTS\tLOG\n")
	for _, p := range st.Processes {
		state := "running"
		if !p.Running {
			state = "down: " + p.LastExit
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\n", p.Name, p.PID, state, p.Restarts, p.Log)
	}
	tw.Flush()

	cs, err := Client(paths.Kubeconfig())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(out, "\nNodes: apiserver not reachable: %v\n", err)
		return nil
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	perNode := map[string]int{}
	for _, p := range pods.Items {
		perNode[p.Spec.NodeName]++
	}
	fmt.Fprintf(tw, "\nNODE\tINTERNAL-IP\tPOD-CIDR\tREADY\tPODS\n")
	for _, n := range nodes.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", n.Name, nodeIP(&n), n.Spec.PodCIDR, nodeReady(&n), perNode[n.Name])
	}
	return tw.Flush()
}

func nodeIP(n *corev1.Node) string {
	if ip := k8s.NodeInternalIP(n); ip.IsValid() {
		return ip.String()
	}
	return "-"
}

func nodeReady(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return "Ready"
			}
			return "NotReady (" + c.Reason + ")"
		}
	}
	return "Unknown"
}
