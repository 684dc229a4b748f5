package agent

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/myelin-net/myelin/internal/kwok"
	"github.com/myelin-net/myelin/internal/policy"
)

// kwokPods are the pods of `myelin scale`'s simulated cluster as the policy loop's
// cache holds them, each with an IP.
func kwokPods(s kwok.Shape) []any {
	out := make([]any, s.Pods)
	for i := range out {
		p := s.Pod(i)
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = fmt.Sprintf("10.%d.%d.%d", 245+i>>16, (i>>8)&255, i&255)
		out[i], _ = slimPod(p)
	}
	return out
}

// BenchmarkPolicyRecompute is what the policy loop does on every pod event in a
// cluster of 50,000 pods, before the BPF maps are read and diffed: list the cache,
// convert the pods, compute, save the identities. `go test -run - -bench
// PolicyRecompute ./internal/agent/` (docs/scale.md).
func BenchmarkPolicyRecompute(b *testing.B) {
	for _, n := range []int{10000, 50000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			pods := kwokPods(kwok.Shape{Nodes: 1000, Pods: n, Services: n / 5})
			list := func() []policy.Pod { return cachedPolicyPods(pods, "", nil) }
			nss := func(labels.Selector) ([]*corev1.Namespace, error) { return nil, nil }
			nps := func(labels.Selector) ([]*networkingv1.NetworkPolicy, error) { return nil, nil }
			ids := policy.NewIdentities()
			path := filepath.Join(b.TempDir(), "ids.json")
			var before runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				in, err := policyInput("kwok-node-0000", list, nss, nps)
				if err != nil {
					b.Fatal(err)
				}
				st := policy.Compute(in, ids)
				if err := ids.Save(path); err != nil {
					b.Fatal(err)
				}
				if len(st.IPCache) != n {
					b.Fatalf("ipcache %d, want %d", len(st.IPCache), n)
				}
			}
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/(1<<20), "MiB-alloc/op")
		})
	}
}
