package kubelet

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Backoff between failed sandbox creations and between restarts of a crashing command.
// Shorter than kubelet's (10 s to 5 min): the lab is for quick feedback.
const (
	minBackoff    = time.Second
	maxBackoff    = 30 * time.Second
	backoffResets = time.Minute // a run this long resets the backoff
)

// worker owns one Pod on this node: its sandbox, its process and its status. All of
// that state is touched only by the worker's own goroutine.
type worker struct {
	k       *Kubelet
	uid     types.UID
	updates chan *corev1.Pod // newest Pod; nil once deleted from the API
	exits   chan exit

	pod     *corev1.Pod
	deleted bool
	sb      *sandbox
	proc    *process
	view    podView
	nextTry time.Time
	backoff time.Duration
	pushed  *corev1.PodStatus
}

func newWorker(k *Kubelet, uid types.UID) *worker {
	return &worker{k: k, uid: uid, updates: make(chan *corev1.Pod, 1), exits: make(chan exit, 1)}
}

// update hands the worker the newest Pod, replacing one it has not read yet.
func (w *worker) update(pod *corev1.Pod) {
	for {
		select {
		case w.updates <- pod:
			return
		default:
			select {
			case <-w.updates:
			default:
			}
		}
	}
}

func (w *worker) run(ctx context.Context) {
	w.adoptSandbox(ctx)
	now := time.Now()
	w.view = podView{hostIP: w.k.cfg.Node.IP.String(), startTime: now, since: now, phase: corev1.PodPending}
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		select {
		case pod := <-w.updates:
			if pod == nil {
				w.deleted = true
			} else {
				w.pod = pod
			}
		case ex := <-w.exits:
			w.onExit(ex)
		case <-retry.C:
		case <-ctx.Done():
			if w.proc != nil {
				w.proc.stop(maxStopGrace)
			}
			return
		}
		if w.pod == nil {
			continue
		}
		if w.deleted || w.pod.DeletionTimestamp != nil {
			w.terminate(ctx)
			return
		}
		w.sync(ctx)
		if wait := time.Until(w.nextTry); wait > 0 {
			retry.Reset(wait)
		}
	}
}

// adoptSandbox takes over the sandbox a previous kubelet made for this Pod.
func (w *worker) adoptSandbox(ctx context.Context) {
	sb := loadSandbox(w.k.cfg.sandboxDir(), string(w.uid))
	if sb == nil {
		return
	}
	if _, err := os.Stat(sb.netnsPath()); err != nil || sb.IP == "" {
		// Half-made: release it and start over.
		if err := w.k.cni.teardown(ctx, sb); err != nil {
			w.k.log.Error("release half-made sandbox", "pod", sb.Namespace+"/"+sb.Name, "err", err)
		}
		return
	}
	w.sb = sb
	w.k.log.Info("adopted existing sandbox", "pod", sb.Namespace+"/"+sb.Name, "ip", sb.IP)
}

// sync moves the Pod one step towards running: sandbox, then process, then status.
func (w *worker) sync(ctx context.Context) {
	defer w.pushStatus(ctx)
	if w.view.terminated != nil || time.Now().Before(w.nextTry) {
		return
	}
	hostNetwork := w.pod.Spec.HostNetwork
	if w.sb == nil && !hostNetwork {
		sb, err := w.k.cni.setup(ctx, w.pod)
		if err != nil {
			msg := fmt.Sprintf("Failed to create pod sandbox: %v", err)
			w.k.log.Error("create pod sandbox", "pod", w.pod.Namespace+"/"+w.pod.Name, "err", err)
			w.k.events.record(ctx, w.pod, corev1.EventTypeWarning, "FailedCreatePodSandBox", msg)
			w.setWaiting("ContainerCreating", msg)
			w.retryLater()
			return
		}
		w.sb, w.backoff = sb, 0
	}
	w.view.sandboxOK = true
	w.view.podIP = w.k.cfg.Node.IP.String()
	netns := ""
	if !hostNetwork {
		w.view.podIP, netns = w.sb.IP, w.sb.NetNS
	}
	if w.proc != nil {
		return
	}
	proc, err := startProcess(w.pod, netns, w.view.podIP, w.k.cfg.podLogDir(), w.exits)
	if err != nil {
		reason := "CreateContainerError"
		if err == errNoCommand {
			reason = "CreateContainerConfigError"
		}
		w.k.events.record(ctx, w.pod, corev1.EventTypeWarning, "Failed", err.Error())
		w.setWaiting(reason, err.Error())
		w.retryLater()
		return
	}
	w.proc = proc
	w.k.events.record(ctx, w.pod, corev1.EventTypeNormal, "Started",
		fmt.Sprintf("Started container %s", w.pod.Spec.Containers[0].Name))
	w.view.running, w.view.waiting, w.view.since = &proc.started, nil, proc.started
	w.view.phase = corev1.PodRunning
}

func (w *worker) setWaiting(reason, msg string) {
	w.view.waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
	w.view.running = nil
	w.view.since = time.Now()
}

func (w *worker) retryLater() {
	w.backoff = min(max(2*w.backoff, minBackoff), maxBackoff)
	w.nextTry = time.Now().Add(w.backoff)
}

// onExit applies the Pod's restartPolicy to a finished command.
func (w *worker) onExit(ex exit) {
	w.proc = nil
	w.view.running = nil
	w.view.since = ex.finished
	if !shouldRestart(w.pod.Spec.RestartPolicy, ex.code) {
		w.view.terminated = &ex
		w.view.phase = corev1.PodSucceeded
		if ex.code != 0 {
			w.view.phase = corev1.PodFailed
		}
		return
	}
	if ex.finished.Sub(ex.started) > backoffResets {
		w.backoff = 0
	}
	w.view.lastExit = &ex
	w.view.restarts++
	w.retryLater()
	w.setWaiting("CrashLoopBackOff", fmt.Sprintf("back-off %v restarting failed container %s (exit code %d)",
		w.backoff, w.pod.Spec.Containers[0].Name, ex.code))
}

// shouldRestart applies a restartPolicy to a command's exit code.
func shouldRestart(policy corev1.RestartPolicy, code int) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return code != 0
	default: // Always, or unset
		return true
	}
}

// terminate stops the command, tears the sandbox down (CNI DEL, netns) and finishes
// the Pod's deletion in the API, as kubelet does once a Pod has stopped.
func (w *worker) terminate(ctx context.Context) {
	if w.proc != nil {
		grace := maxStopGrace
		if g := w.pod.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		}
		w.proc.stop(grace)
		w.proc = nil
	}
	if w.sb != nil {
		for attempt := 1; ; attempt++ {
			err := w.k.cni.teardown(ctx, w.sb)
			if err == nil {
				break
			}
			w.k.log.Error("tear down pod sandbox", "pod", w.pod.Namespace+"/"+w.pod.Name, "attempt", attempt, "err", err)
			if attempt == 5 {
				w.k.events.record(ctx, w.pod, corev1.EventTypeWarning, "FailedKillPod", err.Error())
				break // the record stays on disk; the next kubelet start retries
			}
			time.Sleep(time.Duration(attempt) * time.Second)
		}
		w.sb = nil
	}
	if w.deleted {
		return
	}
	err := w.k.cs.CoreV1().Pods(w.pod.Namespace).Delete(ctx, w.pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptrTo[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &w.uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		w.k.log.Error("finish pod deletion", "pod", w.pod.Namespace+"/"+w.pod.Name, "err", err)
	}
}

// pushStatus writes the Pod's status when it differs from what was last written.
func (w *worker) pushStatus(ctx context.Context) {
	status := buildStatus(w.pod, w.view)
	if w.pushed != nil && equality.Semantic.DeepEqual(*w.pushed, status) {
		return
	}
	pods := w.k.cs.CoreV1().Pods(w.pod.Namespace)
	pod := w.pod.DeepCopy()
	for attempt := 0; attempt < 3; attempt++ {
		pod.Status = status
		_, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		if err == nil {
			w.pushed = &status
			return
		}
		if !apierrors.IsConflict(err) {
			w.k.log.Error("update pod status", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			return
		}
		fresh, gerr := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if gerr != nil {
			return
		}
		pod = fresh
	}
}
