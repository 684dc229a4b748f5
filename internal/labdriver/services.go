package labdriver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/myelin-net/myelin/internal/parallel"
)

// serviceWriters is how many Services CreateServices writes at once.
const serviceWriters = 16

// BulkClient returns a client for the kubeconfig at path without client-side rate
// limits, for writing thousands of objects (scale tests and benchmarks).
func BulkClient(path string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", path, err)
	}
	cfg.UserAgent = "myelin-lab"
	cfg.QPS, cfg.Burst = -1, 0 // negative QPS: no client-side rate limiter
	return kubernetes.NewForConfig(cfg)
}

// CreateServices creates ClusterIP Services <prefix>-0 … <prefix>-(n-1) in the default
// namespace, each selecting app=<app> with TCP port 80 -> targetPort. Services that
// already exist are kept, so it can be resumed.
func CreateServices(ctx context.Context, cs kubernetes.Interface, prefix, app string, n int, targetPort int32) error {
	return parallel.ForEach(ctx, n, serviceWriters, func(ctx context.Context, i int) error {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i), Labels: map[string]string{"myelin.io/bulk": prefix}},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": app},
				Ports:    []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(targetPort)}},
			},
		}
		_, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// DeleteServices deletes the Services CreateServices made with prefix.
func DeleteServices(ctx context.Context, cs kubernetes.Interface, prefix string, n int) error {
	return parallel.ForEach(ctx, n, serviceWriters, func(ctx context.Context, i int) error {
		err := cs.CoreV1().Services("default").Delete(ctx, fmt.Sprintf("%s-%d", prefix, i), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}
