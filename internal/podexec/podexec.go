// Package podexec runs commands in pods through the apiserver's pods/exec, as
// `kubectl exec` does: how `myelin connectivity test` probes from its pods and how
// `myelin sysdump` reads the agents of a cluster's DaemonSet.
package podexec

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/myelin-net/myelin/internal/capbuf"
)

// DefaultMaxOutput is what Exec keeps of a command's output when API.MaxOutput is 0.
const DefaultMaxOutput = 64 << 20

// API runs commands in pods: the way on any cluster with a real kubelet.
type API struct {
	Client kubernetes.Interface
	Config *rest.Config
	// Container to run in ("" = the pod's only or first container).
	Container string
	// MaxOutput bounds the output kept of one command (0 = DefaultMaxOutput).
	MaxOutput int
}

// Exec runs argv in the pod's container and returns stdout and stderr together. Output
// beyond MaxOutput stops the command: Exec then returns what was kept and an error
// saying where it was cut.
func (e API) Exec(ctx context.Context, namespace, pod string, argv []string) (string, error) {
	req := e.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Command: argv, Stdout: true, Stderr: true, Container: e.Container,
	}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(e.Config, "POST", req.URL())
	if err != nil {
		return "", fmt.Errorf("exec in pod %s/%s: %w", namespace, pod, err)
	}
	limit := e.MaxOutput
	if limit == 0 {
		limit = DefaultMaxOutput
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	out := capbuf.New(limit, stop) // stdout and stderr are written concurrently
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: out, Stderr: out})
	text := string(out.Bytes())
	if cut := out.Err(); cut != nil {
		return strings.TrimSpace(text), cut
	}
	if err != nil {
		return strings.TrimSpace(text), fmt.Errorf("%s: %w", FirstLine(text), err)
	}
	return strings.TrimSpace(text), nil
}

// FirstLine is the first line of s, trimmed: what a one-line error shows of an output.
func FirstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
