package kubelet

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podView is what the kubelet knows about a Pod, from which its status is computed.
// Keeping the computation pure (no clocks, no API) makes it testable and lets the
// worker skip updates that would change nothing.
type podView struct {
	hostIP     string
	podIP      string
	sandboxOK  bool
	startTime  time.Time // when the kubelet first saw the Pod
	since      time.Time // when the container last changed state
	running    *time.Time
	waiting    *corev1.ContainerStateWaiting
	terminated *exit // the container's final exit (terminal Pods)
	lastExit   *exit // the previous run's exit
	restarts   int32
	phase      corev1.PodPhase
}

func terminatedState(e *exit) *corev1.ContainerStateTerminated {
	reason := "Completed"
	if e.code != 0 {
		reason = "Error"
	}
	return &corev1.ContainerStateTerminated{
		ExitCode: int32(e.code), Reason: reason,
		StartedAt: metav1.NewTime(e.started), FinishedAt: metav1.NewTime(e.finished),
	}
}

func condition(t corev1.PodConditionType, ok bool, since time.Time) corev1.PodCondition {
	s := corev1.ConditionFalse
	if ok {
		s = corev1.ConditionTrue
	}
	return corev1.PodCondition{Type: t, Status: s, LastTransitionTime: metav1.NewTime(since)}
}

// buildStatus computes a Pod's status the way kubelet reports it.
func buildStatus(pod *corev1.Pod, v podView) corev1.PodStatus {
	c := pod.Spec.Containers[0]
	cs := corev1.ContainerStatus{
		Name: c.Name, Image: c.Image, ImageID: "", RestartCount: v.restarts,
		ContainerID: "myelin-lab://" + string(pod.UID),
	}
	switch {
	case v.running != nil:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(*v.running)}
		cs.Ready, cs.Started = true, ptrTo(true)
	case v.terminated != nil:
		cs.State.Terminated = terminatedState(v.terminated)
		cs.Started = ptrTo(false)
	case v.waiting != nil:
		cs.State.Waiting = v.waiting
		cs.Started = ptrTo(false)
	default:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		cs.Started = ptrTo(false)
	}
	if v.lastExit != nil {
		cs.LastTerminationState.Terminated = terminatedState(v.lastExit)
	}
	st := corev1.PodStatus{
		Phase:             v.phase,
		HostIP:            v.hostIP,
		StartTime:         ptrTo(metav1.NewTime(v.startTime)),
		ContainerStatuses: []corev1.ContainerStatus{cs},
		QOSClass:          corev1.PodQOSBestEffort,
		Conditions: []corev1.PodCondition{
			condition(corev1.PodReadyToStartContainers, v.sandboxOK, v.since),
			condition(corev1.PodInitialized, true, v.startTime),
			condition(corev1.ContainersReady, cs.Ready, v.since),
			condition(corev1.PodReady, cs.Ready, v.since),
			condition(corev1.PodScheduled, true, v.startTime),
		},
	}
	if v.hostIP != "" {
		st.HostIPs = []corev1.HostIP{{IP: v.hostIP}}
	}
	if v.podIP != "" {
		st.PodIP = v.podIP
		st.PodIPs = []corev1.PodIP{{IP: v.podIP}}
	}
	return st
}

func ptrTo[T any](v T) *T { return &v }
