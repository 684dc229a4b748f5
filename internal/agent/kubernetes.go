package agent

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/myelin-net/myelin/internal/kube"
)

// kubeInterval is how often the agent checks that the apiserver answers.
const kubeInterval = 30 * time.Second

// kubeLoop records the apiserver's version and reachability for status (loop
// "kubernetes").
type kubeLoop struct {
	cs      kube.Client
	loops   *loops
	version atomic.Pointer[string]
}

func (k *kubeLoop) Run(ctx context.Context) {
	for {
		v, err := k.cs.ServerVersion(ctx)
		if err == nil {
			k.version.Store(&v)
		}
		k.loops.report("kubernetes", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(kubeInterval):
		}
	}
}

// serverVersion is the apiserver's version last read, "" before the first answer.
func (k *kubeLoop) serverVersion() string {
	if v := k.version.Load(); v != nil {
		return *v
	}
	return ""
}
