package kubelet

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u-1"},
		Spec: corev1.PodSpec{NodeName: "myelin-node-1", Containers: []corev1.Container{{
			Name: "c", Command: []string{"sleep"}, Args: []string{"1"},
			Env: []corev1.EnvVar{
				{Name: "LITERAL", Value: "x"},
				{Name: "MY_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
				{Name: "MY_NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
			},
		}}},
	}
}

func TestBuildStatus(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run := t0.Add(time.Second)
	base := podView{hostIP: "198.18.0.11", startTime: t0, since: t0, phase: corev1.PodPending}
	tests := []struct {
		name      string
		view      func(v podView) podView
		phase     corev1.PodPhase
		ready     bool
		state     string // running | waiting:<reason> | terminated:<exit code>
		podIP     string
		restarts  int32
		lastState bool
	}{
		{"creating", func(v podView) podView { return v }, corev1.PodPending, false, "waiting:ContainerCreating", "", 0, false},
		{"sandbox failed", func(v podView) podView {
			v.waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: "Failed to create pod sandbox"}
			return v
		}, corev1.PodPending, false, "waiting:ContainerCreating", "", 0, false},
		{"running", func(v podView) podView {
			v.sandboxOK, v.podIP, v.running, v.phase = true, "10.244.0.2", &run, corev1.PodRunning
			return v
		}, corev1.PodRunning, true, "running", "10.244.0.2", 0, false},
		{"crash loop", func(v podView) podView {
			v.sandboxOK, v.podIP, v.phase, v.restarts = true, "10.244.0.2", corev1.PodRunning, 3
			v.waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
			v.lastExit = &exit{code: 1, started: run, finished: run.Add(time.Second)}
			return v
		}, corev1.PodRunning, false, "waiting:CrashLoopBackOff", "10.244.0.2", 3, true},
		{"succeeded", func(v podView) podView {
			v.sandboxOK, v.podIP, v.phase = true, "10.244.0.2", corev1.PodSucceeded
			v.terminated = &exit{code: 0, started: run, finished: run.Add(time.Second)}
			return v
		}, corev1.PodSucceeded, false, "terminated:0", "10.244.0.2", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := buildStatus(testPod(), tt.view(base))
			if st.Phase != tt.phase {
				t.Errorf("phase = %s, want %s", st.Phase, tt.phase)
			}
			if st.HostIP != "198.18.0.11" || st.StartTime == nil || !st.StartTime.Time.Equal(t0) {
				t.Errorf("hostIP %q startTime %v", st.HostIP, st.StartTime)
			}
			if st.PodIP != tt.podIP || (tt.podIP != "" && (len(st.PodIPs) != 1 || st.PodIPs[0].IP != tt.podIP)) {
				t.Errorf("podIP %q podIPs %v, want %q", st.PodIP, st.PodIPs, tt.podIP)
			}
			ready := false
			for _, c := range st.Conditions {
				if c.Type == corev1.PodReady {
					ready = c.Status == corev1.ConditionTrue
				}
			}
			if ready != tt.ready {
				t.Errorf("Ready = %v, want %v", ready, tt.ready)
			}
			cs := st.ContainerStatuses[0]
			var state string
			switch {
			case cs.State.Running != nil:
				state = "running"
			case cs.State.Waiting != nil:
				state = "waiting:" + cs.State.Waiting.Reason
			case cs.State.Terminated != nil:
				state = fmt.Sprintf("terminated:%d", cs.State.Terminated.ExitCode)
			}
			if state != tt.state {
				t.Errorf("state = %s, want %s", state, tt.state)
			}
			if cs.RestartCount != tt.restarts || (cs.LastTerminationState.Terminated != nil) != tt.lastState {
				t.Errorf("restarts %d lastState %+v", cs.RestartCount, cs.LastTerminationState)
			}
		})
	}
}

func TestShouldRestart(t *testing.T) {
	tests := []struct {
		policy corev1.RestartPolicy
		code   int
		want   bool
	}{
		{corev1.RestartPolicyAlways, 0, true},
		{corev1.RestartPolicyAlways, 1, true},
		{"", 0, true},
		{corev1.RestartPolicyOnFailure, 0, false},
		{corev1.RestartPolicyOnFailure, 2, true},
		{corev1.RestartPolicyNever, 1, false},
	}
	for _, tt := range tests {
		if got := shouldRestart(tt.policy, tt.code); got != tt.want {
			t.Errorf("shouldRestart(%q, %d) = %v, want %v", tt.policy, tt.code, got, tt.want)
		}
	}
}

func TestContainerEnv(t *testing.T) {
	pod := testPod()
	env := map[string]bool{}
	for _, e := range containerEnv(pod, pod.Spec.Containers[0], "10.244.0.7") {
		env[e] = true
	}
	for _, want := range []string{"LITERAL=x", "MY_IP=10.244.0.7", "MY_NODE=myelin-node-1", "POD_NAME=web", "POD_NAMESPACE=default"} {
		if !env[want] {
			t.Errorf("environment lacks %s", want)
		}
	}
}
