package labdriver

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/myelin-net/myelin/internal/lab"
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
	cfg.UserAgent, cfg.Dial = "myelin-lab", lab.Dial
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

// A Backend is an endpoint of a Service written by CreateServicesWithEndpoints: a pod's
// address and its node.
type Backend struct {
	IP   netip.Addr
	Node string
}

// Bulk Services with their endpoints (CreateServicesWithEndpoints).
const (
	// endpointsManager marks the EndpointSlices CreateServicesWithEndpoints writes, so
	// the EndpointSlice controller leaves them alone.
	endpointsManager = "myelin-lab"
	// servicesPerNamespace keeps the controllers' namespace-scoped scans short.
	servicesPerNamespace = 100
)

// BulkService is the namespace and name of Service i of CreateServicesWithEndpoints
// with prefix: <prefix>-<i> in namespace <prefix>-<i/100>.
func BulkService(prefix string, i int) (namespace, name string) {
	return fmt.Sprintf("%s-%d", prefix, i/servicesPerNamespace), fmt.Sprintf("%s-%d", prefix, i)
}

// CreateServicesWithEndpoints creates n ClusterIP Services without a selector, named by
// BulkService, 100 to a namespace, each with TCP port 80 and one EndpointSlice of
// backends on targetPort written here. A proxy sees what CreateServices gives it (a
// Service and a slice of ready endpoints), but the controller manager computes
// nothing, the apiserver takes three writes per Service instead of four, and the
// namespaces keep the controllers' scans short: 6,000 Services are written in 30% less
// time (docs/scale.md, "Creating Services in bulk"). Namespaces, Services and slices
// that exist are kept, so it can be resumed, or grown by calling it again with a
// larger n.
func CreateServicesWithEndpoints(ctx context.Context, cs kubernetes.Interface, prefix string, n int, targetPort int32, backends []Backend) error {
	namespaces := (n + servicesPerNamespace - 1) / servicesPerNamespace
	err := parallel.ForEach(ctx, namespaces, serviceWriters, func(ctx context.Context, k int) error {
		ns, _ := BulkService(prefix, k*servicesPerNamespace)
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	ready := true
	var eps []discoveryv1.Endpoint
	for _, b := range backends {
		node := b.Node
		eps = append(eps, discoveryv1.Endpoint{Addresses: []string{b.IP.String()}, NodeName: &node,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	portName, proto := "http", corev1.ProtocolTCP
	return parallel.ForEach(ctx, n, serviceWriters, func(ctx context.Context, i int) error {
		ns, name := BulkService(prefix, i)
		labels := map[string]string{"myelin.io/bulk": prefix}
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.ServiceSpec{
				Ports: []corev1.ServicePort{{Name: portName, Protocol: proto, Port: 80, TargetPort: intstr.FromInt32(targetPort)}},
			},
		}
		if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: endpointsManager, "myelin.io/bulk": prefix}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   eps,
			Ports:       []discoveryv1.EndpointPort{{Name: &portName, Protocol: &proto, Port: &targetPort}},
		}
		_, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}
