package agent

import (
	"reflect"
	"time"

	"k8s.io/client-go/tools/cache"
)

// Every computation of the policy loop reads every pod of the cluster: with 50,000
// pods one costs ~0.1 s of CPU and ~36 MiB of garbage before the maps are diffed
// (BenchmarkPolicyRecompute, docs/scale.md). Two things keep pod churn elsewhere in the
// cluster from turning that into a busy core: pod events that change nothing policy
// reads do not start one (podPolicyHandler), and after each computation the loop
// waits in proportion to what it cost (policyPause) so that a burst of changes is
// gathered into fewer computations.

// policyPauseFactor and policyPauseMax bound the loop to about a quarter of a vCPU
// under continuous churn once computations cost more than the debounce, and a change
// to at most ~2 s before it is computed.
const (
	policyPauseFactor = 3
	policyPauseMax    = 2 * time.Second
)

// policyPause is how long the loop gathers changes after one arrived, given what its
// last computation took: the debounce while computations are cheaper than it (the
// latency of one change stays what docs/policy.md measures), else 3x their cost.
func policyPause(last time.Duration) time.Duration {
	if last < policyDebounce {
		return policyDebounce
	}
	return min(policyPauseFactor*last, policyPauseMax)
}

// podPolicyHandler pokes the policy loop on the pod events that change its input: a
// pod appearing or disappearing with an address, or changing what policy.PodOf and
// policyInput read (address, labels, node, named ports, a finished phase). Status
// updates of a running pod (conditions, container states) and pods still without an
// address change nothing.
func podPolicyHandler(poke func()) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if _, ok := podPolicyView(obj); ok {
				poke()
			}
		},
		UpdateFunc: func(old, cur any) {
			o, okOld := podPolicyView(old)
			n, okNew := podPolicyView(cur)
			if okOld != okNew || !reflect.DeepEqual(o, n) {
				poke()
			}
		},
		DeleteFunc: func(obj any) {
			// A tombstone (the delete seen late) may hide a pod with an address.
			if _, tomb := obj.(cache.DeletedFinalStateUnknown); tomb {
				poke()
				return
			}
			if _, ok := podPolicyView(obj); ok {
				poke()
			}
		},
	}
}
