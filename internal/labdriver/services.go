package labdriver

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
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
	return forEachService(ctx, n, func(ctx context.Context, i int) error {
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
	return forEachService(ctx, n, func(ctx context.Context, i int) error {
		err := cs.CoreV1().Services("default").Delete(ctx, fmt.Sprintf("%s-%d", prefix, i), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// forEachService runs fn for 0…n-1 on serviceWriters goroutines and returns the first error.
func forEachService(ctx context.Context, n int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for w := 0; w < serviceWriters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
