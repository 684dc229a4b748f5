package k8s

import corev1 "k8s.io/api/core/v1"

// PodReady reports whether the pod's Ready condition is True (a crash-looping pod is
// Running but not Ready).
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
