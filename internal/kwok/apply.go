package kwok

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/parallel"
)

// Writers is how many requests Create keeps in flight: enough to keep the lab's
// apiserver busy on a 2-vCPU machine without queueing thousands of requests.
const Writers = 32

// Cluster is a simulated cluster in a lab: its shape and the lab ranges it takes
// addresses from.
type Cluster struct {
	Shape
	ClusterCIDR netip.Prefix // the lab's pod CIDR
	SegmentA    netip.Prefix // the lab's node segment
}

// Create makes what is missing of the simulated cluster: the namespaces, the Nodes, the
// pods and the Services (in that order, each in parallel: with the pods first, most are
// running when the controller-manager writes their Services' EndpointSlices, which then
// change far less often). Objects that exist are kept, so a second call resumes or does
// nothing.
func (c Cluster) Create(ctx context.Context, cs kubernetes.Interface) error {
	if err := c.CreateNamespaces(ctx, cs); err != nil {
		return err
	}
	if err := parallel.ForEach(ctx, c.Nodes, Writers, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().Nodes().Create(ctx, Node(i, c.ClusterCIDR, c.SegmentA), metav1.CreateOptions{})
		return ignoreExists(err)
	}); err != nil {
		return fmt.Errorf("create %d kwok nodes: %w", c.Nodes, err)
	}
	if err := c.CreatePods(ctx, cs, 0, c.Pods); err != nil {
		return fmt.Errorf("create %d pods: %w", c.Pods, err)
	}
	if err := parallel.ForEach(ctx, c.Services, Writers, func(ctx context.Context, j int) error {
		_, err := cs.CoreV1().Services(ServiceNamespace(j)).Create(ctx, Service(j), metav1.CreateOptions{})
		return ignoreExists(err)
	}); err != nil {
		return fmt.Errorf("create %d Services: %w", c.Services, err)
	}
	return nil
}

// CreateNamespaces creates the shape's namespaces that are missing, labeled as the
// Nodes are (LabelKey=LabelValue).
func (c Cluster) CreateNamespaces(ctx context.Context, cs kubernetes.Interface) error {
	return parallel.ForEach(ctx, c.Namespaces(), Writers, func(ctx context.Context, k int) error {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: NamespaceName(k), Labels: map[string]string{LabelKey: LabelValue}}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); ignoreExists(err) != nil {
			return fmt.Errorf("create namespace %s: %w", ns.Name, err)
		}
		return nil
	})
}

// CreatePods creates pods from … to-1 (those missing).
func (c Cluster) CreatePods(ctx context.Context, cs kubernetes.Interface, from, to int) error {
	return parallel.ForEach(ctx, to-from, Writers, func(ctx context.Context, k int) error {
		p := c.Pod(from + k)
		_, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		return ignoreExists(err)
	})
}

// DeletePods deletes pods from … to-1 at once (grace period 0: kwok runs nothing to stop).
func (c Cluster) DeletePods(ctx context.Context, cs kubernetes.Interface, from, to int) error {
	zero := int64(0)
	return parallel.ForEach(ctx, to-from, Writers, func(ctx context.Context, k int) error {
		i := from + k
		err := cs.CoreV1().Pods(c.PodNamespace(i)).Delete(ctx, PodName(i), metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
