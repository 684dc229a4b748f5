package connectivity

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// APIExecutor runs commands in pods through the apiserver's pods/exec, as
// `kubectl exec` does: the way on any cluster with a real kubelet.
type APIExecutor struct {
	Client kubernetes.Interface
	Config *rest.Config
}

// Exec runs argv in the pod's first container and returns stdout and stderr together.
func (e APIExecutor) Exec(ctx context.Context, namespace, pod string, argv []string) (string, error) {
	req := e.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Command: argv, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(e.Config, "POST", req.URL())
	if err != nil {
		return "", fmt.Errorf("exec in pod %s/%s: %w", namespace, pod, err)
	}
	var out bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out})
	if err != nil {
		return strings.TrimSpace(out.String()), fmt.Errorf("%s: %w", firstLine(out.String()), err)
	}
	return strings.TrimSpace(out.String()), nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
