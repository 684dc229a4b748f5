package kubelet

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// Config is what one lab kubelet needs: its node's plan and the lab's paths.
type Config struct {
	Node  labplan.Node
	Plan  labplan.Plan
	Paths labplan.Paths
}

// dirs of one node's kubelet.
func (c Config) nodeDir() string     { return c.Paths.NodeDir(c.Node.Name) }
func (c Config) cniConfDir() string  { return c.Paths.CNIConfDir(c.Node.Name) }
func (c Config) cniCacheDir() string { return filepath.Join(c.nodeDir(), "cni", "cache") }
func (c Config) sandboxDir() string  { return filepath.Join(c.nodeDir(), "sandboxes") }
func (c Config) podLogDir() string   { return filepath.Join(c.nodeDir(), "pods") }

// cniBinDirs are searched for plugins in order: the node's own (where a CNI installs
// itself, as myelin-agent does) and Debian's reference plugins.
func (c Config) cniBinDirs() []string {
	return []string{c.Paths.CNIBinDir(c.Node.Name), cni.ReferencePluginDir}
}

// Kubelet realises the Pods of one node.
type Kubelet struct {
	cfg    Config
	cs     kubernetes.Interface
	log    *slog.Logger
	cni    *cniRuntime
	events *eventRecorder

	mu      sync.Mutex
	workers map[types.UID]*worker
}

// Run registers the node and realises its Pods until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	cs, err := lab.Client(cfg.Paths.ComponentKubeconfig(cfg.Node.Name))
	if err != nil {
		return err
	}
	k := &Kubelet{
		cfg:     cfg,
		cs:      cs,
		log:     log,
		cni:     newCNIRuntime(cfg),
		events:  &eventRecorder{cs: cs, node: cfg.Node.Name},
		workers: map[types.UID]*worker{},
	}
	if err := k.registerNode(ctx); err != nil {
		return err
	}
	go k.heartbeat(ctx)
	go func() {
		if err := lab.RunNodeNetwork(ctx, cfg.Paths, cfg.Plan, cfg.Node, log); err != nil {
			log.Error("node network", "err", err)
		}
	}()
	return k.watchPods(ctx)
}

// watchPods feeds every change of a Pod bound to this node to that Pod's worker.
func (k *Kubelet) watchPods(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(k.cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.cfg.Node.Name).String()
		}))
	pods := factory.Core().V1().Pods().Informer()
	_, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.dispatch(ctx, obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { k.dispatch(ctx, obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				k.gone(pod.UID)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced) {
		return fmt.Errorf("pod watch of node %s did not sync", k.cfg.Node.Name)
	}
	k.collectOrphans(ctx, pods.GetStore())
	<-ctx.Done()
	return nil
}

// dispatch hands the newest version of a Pod to its worker, starting one if needed.
func (k *Kubelet) dispatch(ctx context.Context, pod *corev1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	w, ok := k.workers[pod.UID]
	if !ok {
		w = newWorker(k, pod.UID)
		k.workers[pod.UID] = w
		go func() {
			w.run(ctx)
			k.mu.Lock()
			delete(k.workers, pod.UID)
			k.mu.Unlock()
		}()
	}
	w.update(pod)
}

// gone tells a Pod's worker that the Pod no longer exists in the API.
func (k *Kubelet) gone(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if w, ok := k.workers[uid]; ok {
		w.update(nil)
	}
}

// collectOrphans tears down sandboxes left on disk by a previous kubelet for Pods that
// no longer exist (deleted while this node's kubelet was down).
func (k *Kubelet) collectOrphans(ctx context.Context, store cache.Store) {
	live := map[string]bool{}
	for _, obj := range store.List() {
		live[string(obj.(*corev1.Pod).UID)] = true
	}
	for _, sb := range loadSandboxes(k.cfg.sandboxDir()) {
		if live[sb.UID] {
			continue
		}
		k.log.Info("removing the sandbox of a pod deleted while the kubelet was down", "pod", sb.Namespace+"/"+sb.Name)
		if err := k.cni.teardown(ctx, sb); err != nil {
			k.log.Error("remove orphaned sandbox", "pod", sb.Namespace+"/"+sb.Name, "err", err)
		}
	}
}
