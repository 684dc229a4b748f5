package agent

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// slimPod is the transform of the policy loop's Pod informer, which holds every pod of
// the cluster: it keeps only what policyInput and policy.PodOf read (name, namespace,
// labels, node, host network, phase, IPs and the containers' ports) and drops the rest
// (managed fields, annotations, volumes, images, env, probes, conditions, container
// statuses) before the cache stores the pod. With 50,000 pods that is most of the
// agent's memory (docs/scale.md). Other objects (tombstones) pass unchanged.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID,
			ResourceVersion: p.ResourceVersion, Labels: p.Labels, DeletionTimestamp: p.DeletionTimestamp},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}
	for _, c := range p.Spec.Containers {
		if len(c.Ports) > 0 {
			out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Ports: c.Ports})
		}
	}
	return out, nil
}
