package sysdump

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/myelin-net/myelin/internal/podexec"
)

// AgentSelector selects the chart's agent pods (kube-system).
const AgentSelector = "app.kubernetes.io/name=myelin"

// PodNode is one node of a real cluster: its agent pod of the chart's DaemonSet,
// read through pods/exec (`myelin sysdump agent|drops|maps` in the agent's container,
// which has the node's host network) and the pod's log.
type PodNode struct {
	Client   kubernetes.Interface
	Exec     Executor
	Pod      corev1.Pod
	DropsFor time.Duration
	// Shared says another running agent pod is on the node too (a rollout's old
	// and new pod): the node's files are named after the pod as well.
	Shared bool
	// timeout bounds one command (0 = execTimeout).
	timeout time.Duration
}

// Executor runs a command in a pod and returns its output (podexec.API).
type Executor interface {
	Exec(ctx context.Context, namespace, pod string, argv []string) (string, error)
}

// execTimeout bounds one command in an agent's container beyond the time it is asked
// to wait (drops' --for): a hung ip, bpftool or agent must not hold the dump forever.
const execTimeout = time.Minute

// PodNodes lists the running agent pods of the chart's DaemonSet, one per node.
func PodNodes(ctx context.Context, cs kubernetes.Interface, ex podexec.API, dropsFor time.Duration) ([]Node, error) {
	list, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: AgentSelector})
	if err != nil {
		return nil, fmt.Errorf("list myelin agent pods (kube-system, %s): %w", AgentSelector, err)
	}
	ex.Container = "agent"
	var running []corev1.Pod
	perNode := map[string]int{}
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning {
			running = append(running, p)
			perNode[p.Spec.NodeName]++
		}
	}
	var out []Node
	for _, p := range running {
		out = append(out, PodNode{Client: cs, Exec: ex, Pod: p, DropsFor: dropsFor, Shared: perNode[p.Spec.NodeName] > 1})
	}
	return out, nil
}

// Name is the node the agent pod runs on, and the pod's name when Shared.
func (n PodNode) Name() string {
	if n.Shared {
		return n.Pod.Spec.NodeName + "-" + n.Pod.Name
	}
	return n.Pod.Spec.NodeName
}

// myelin runs `myelin sysdump ARGS` in the agent's container.
func (n PodNode) myelin(ctx context.Context, args ...string) ([]byte, error) {
	return n.output(ctx, append([]string{"myelin", "sysdump"}, args...))
}

// execTries bounds the tries of a command whose output was lost or cut short; they
// back off 0.2 s more each time (9 s in all), as a loaded node loses outputs in runs.
// Only a try that came back within quickTry is repeated: a lost output comes back at
// once, while a command that was slow to answer nothing would be as slow again.
const (
	execTries = 10
	quickTry  = 10 * time.Second
)

// output runs argv, whose output is never empty, in the agent's container; an empty
// one is retried: with the lab's containerd 1.6 the output of a process that exits at
// once is sometimes lost on its way back through pods/exec.
func (n PodNode) output(ctx context.Context, argv []string) ([]byte, error) {
	out, err := n.retried(ctx, argv, "no output", func(out string) bool { return strings.TrimSpace(out) != "" })
	return []byte(out), err
}

// retried runs argv until whole accepts its output, at most execTries times; a try
// that failed, ran out of time or was slower than quickTry is not repeated. Its
// error says what was missing (lacking) and after how many tries.
func (n PodNode) retried(ctx context.Context, argv []string, lacking string, whole func(string) bool) (string, error) {
	for try := 1; ; try++ {
		start := time.Now()
		out, err := n.exec(ctx, argv, 0)
		if err != nil || whole(out) {
			return out, err
		}
		took := time.Since(start)
		if try == execTries || took > quickTry {
			return out, fmt.Errorf("exec %s: %s after %d tries, the last one %d bytes in %v (only answers quicker than %v are asked for again): try it with kubectl exec",
				n.where(argv), lacking, try, len(out), took.Round(time.Millisecond), quickTry)
		}
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("exec %s: %s after %d tries, then stopped: %w", n.where(argv), lacking, try, ctx.Err())
		case <-time.After(time.Duration(try) * 200 * time.Millisecond):
		}
	}
}

// where names a command run in the agent's container, the pod and the node.
func (n PodNode) where(argv []string) string {
	return fmt.Sprintf("%s in %s/%s (node %s)", strings.Join(argv, " "), n.Pod.Namespace, n.Pod.Name, n.Pod.Spec.NodeName)
}

// exec runs argv in the agent's container with a deadline of wait (how long the
// command itself waits) plus the timeout; its errors name the command, pod and node.
// A command whose context ended failed, whatever the executor said: what it returned
// is kept, never taken for a whole answer or asked for again.
func (n PodNode) exec(ctx context.Context, argv []string, wait time.Duration) (string, error) {
	limit := n.timeout
	if limit == 0 {
		limit = execTimeout
	}
	limit += wait
	ectx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	out, err := n.Exec.Exec(ectx, n.Pod.Namespace, n.Pod.Name, argv)
	switch {
	case ectx.Err() != nil && ctx.Err() == nil:
		return out, fmt.Errorf("exec %s: no answer in %v, stopped", n.where(argv), limit)
	case ectx.Err() != nil:
		return out, fmt.Errorf("exec %s: stopped: %w", n.where(argv), ctx.Err())
	case err != nil:
		return out, fmt.Errorf("exec %s: %w", n.where(argv), err)
	}
	return out, nil
}

// Agent asks the pod's agent for one view.
func (n PodNode) Agent(ctx context.Context, view string) (any, error) {
	out, err := n.wholeJSON(ctx, "agent", view)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(out), nil
}

// wholeJSON runs `myelin sysdump ARGS`, whose answer is one JSON document, and asks
// again when what came back is not whole JSON: pods/exec through the lab's containerd
// 1.6 loses outputs, cuts them short or pads them with NUL bytes on a loaded node.
func (n PodNode) wholeJSON(ctx context.Context, args ...string) ([]byte, error) {
	argv := append([]string{"myelin", "sysdump"}, args...)
	out, err := n.retried(ctx, argv, "no whole JSON answer", func(out string) bool { return json.Valid([]byte(out)) })
	if err != nil {
		return nil, err
	}
	return []byte(out), nil
}

// Drops streams the agent's drops for DropsFor inside the pod.
func (n PodNode) Drops(ctx context.Context) ([]byte, error) {
	out, err := n.exec(ctx, []string{"myelin", "sysdump", "drops", "--for", n.DropsFor.String()}, n.DropsFor)
	return []byte(out), err
}

// Run runs argv in the agent's container (the node's network namespace).
func (n PodNode) Run(ctx context.Context, argv ...string) ([]byte, error) { return n.output(ctx, argv) }

// Log returns the end of the agent container's log, at most max bytes, within
// execTimeout. limitBytes only asks the apiserver (or a proxy before it) for max
// bytes: what comes beyond is not read, and the cut is said in the error.
func (n PodNode) Log(ctx context.Context, max int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	req := n.Client.CoreV1().Pods(n.Pod.Namespace).GetLogs(n.Pod.Name, &corev1.PodLogOptions{
		Container: "agent", TailLines: ptr.To[int64](20000), LimitBytes: ptr.To(int64(max)),
	})
	where := fmt.Sprintf("log of %s/%s (node %s)", n.Pod.Namespace, n.Pod.Name, n.Pod.Spec.NodeName)
	body, err := req.Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the %s: %w", where, err)
	}
	defer body.Close()
	out, err := io.ReadAll(io.LimitReader(body, int64(max)+1))
	switch {
	case len(out) > max:
		return out[:max], fmt.Errorf("read the %s: the apiserver sent more than the %d bytes asked (limitBytes): truncated at %d bytes", where, max, max)
	case err != nil:
		return out, fmt.Errorf("read the %s: %w", where, err)
	}
	return out, nil
}

// Maps dumps the pinned maps inside the pod (hex keys and values: no bpftool there).
func (n PodNode) Maps(ctx context.Context, max int) (map[string]any, error) {
	out, err := n.wholeJSON(ctx, "maps", "--max", strconv.Itoa(max))
	if err != nil {
		return nil, err
	}
	var maps map[string]json.RawMessage
	if err := json.Unmarshal(out, &maps); err != nil {
		return nil, fmt.Errorf("read map dump of %s: %w", n.Pod.Name, err)
	}
	res := map[string]any{}
	for k, v := range maps {
		res[k] = v
	}
	return res, nil
}

// BPF lists the kernel's myelin programs and its links from inside the pod.
func (n PodNode) BPF(ctx context.Context) ([]byte, error) { return n.myelin(ctx, "bpf") }
