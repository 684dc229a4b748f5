package service

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/myelin-net/myelin/internal/kube"
)

// byServiceIndex indexes EndpointSlices by the namespace/name of their Service.
const byServiceIndex = "service"

// resyncInterval is how often every Service is synced again, whether or not an event
// said it changed: a Service whose sync was dropped (a missed event, a deletion while
// retries gave up) is repaired within this time.
const resyncInterval = 5 * time.Minute

// Watcher keeps a Manager in step with the cluster's Services and EndpointSlices.
type Watcher struct {
	cs     kube.Client
	m      *Manager
	o      Options
	log    *slog.Logger
	report func(error) // called after every sync of a Service, for the agent's loop status
	synced chan struct{}
	health func(key string, hc *HealthCheck) // nil: no health checks served
	pruned func()                            // nil: nothing runs after the first Prune
	// latency, when set (OnSyncLatency), gets the time from a Service's first
	// queued event to its frontends written; pending holds those first event times.
	latency   func(time.Duration)
	pendingMu sync.Mutex
	pending   map[string]time.Time
	// queue and caches are set by Prestart (or Run, without it), at started.
	queue   workqueue.TypedRateLimitingInterface[string]
	caches  serviceCaches
	cached  []cache.InformerSynced
	started time.Time
}

// NewWatcher returns a Watcher that applies to m what the Services and
// EndpointSlices of cs say for this node (o). report receives the outcome of every
// Service sync.
func NewWatcher(cs kube.Client, m *Manager, o Options, report func(error), log *slog.Logger) *Watcher {
	return &Watcher{cs: cs, m: m, o: o, log: log, report: report, synced: make(chan struct{})}
}

// OnPruned has f run once, after the first pass has programmed every Service and
// pruned what none claims, before the watcher applies any other change: the Service
// maps then hold exactly what the cluster says. Call before Run.
func (w *Watcher) OnPruned(f func()) { w.pruned = f }

// OnHealthCheck makes every sync of a Service also hand f the Service's health check
// on this node (nil when it needs none or is gone), computed from the same objects
// as its frontends. Call before Run.
func (w *Watcher) OnHealthCheck(f func(key string, hc *HealthCheck)) { w.health = f }

// syncHealth hands the health check of svc (nil: deleted) to the OnHealthCheck function.
func (w *Watcher) syncHealth(key string, svc *cachedService, slices []*cachedSlice) {
	if w.health == nil {
		return
	}
	var hc *HealthCheck
	if svc != nil {
		if h, ok := desiredHealthCheck(svc, slices); ok {
			hc = &h
		}
	}
	w.health(key, hc)
}

// OnSyncLatency makes the watcher hand f, each time a Service is written to the
// datapath after an informer event, the time since the first event that queued it
// (retries included; resyncs, which no event caused, are not measured). Call before Run.
func (w *Watcher) OnSyncLatency(f func(time.Duration)) {
	w.pendingMu.Lock()
	defer w.pendingMu.Unlock()
	w.latency, w.pending = f, map[string]time.Time{}
}

// SetManager makes the watcher apply to m, for a watcher made (and prestarted)
// before its Manager existed. Call before Run.
func (w *Watcher) SetManager(m *Manager) { w.m = m }

// eventSeen notes the time of key's first event since it was last written.
func (w *Watcher) eventSeen(key string) {
	w.pendingMu.Lock()
	defer w.pendingMu.Unlock()
	if w.latency == nil {
		return
	}
	if _, ok := w.pending[key]; !ok {
		w.pending[key] = time.Now()
	}
}

// written reports key's event-to-datapath latency once its sync succeeded.
func (w *Watcher) written(key string) {
	w.pendingMu.Lock()
	t, ok := w.pending[key]
	delete(w.pending, key)
	f := w.latency
	w.pendingMu.Unlock()
	if ok && f != nil {
		f(time.Since(t))
	}
}

// Synced is closed once every Service that existed at start is programmed and what
// no Service claims any more is pruned.
func (w *Watcher) Synced() <-chan struct{} { return w.synced }

// Run watches until ctx ends. Events only queue the Service's name; one worker
// applies each queued Service, so a burst of 10,000 Services costs this goroutine
// time and nothing else, and a Service changed many times while queued is applied
// once. Failed syncs are retried with backoff, and every Service is synced again
// every resyncInterval (resync).
func (w *Watcher) Run(ctx context.Context) {
	if w.queue == nil {
		w.Prestart(ctx)
	}
	queue, c := w.queue, w.caches
	defer queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), w.cached...) {
		return
	}
	w.firstPass(c, time.Since(w.started))
	go func() { <-ctx.Done(); queue.ShutDown() }()
	go w.resync(ctx, queue, c.serviceKeys)
	for w.processNext(queue, c) {
	}
}

// serviceCaches are the informer caches the watcher reads Services and their
// EndpointSlices from: they hold the records of transform.go, not API objects, so
// they are read through their indexers (a typed lister would expect the objects).
type serviceCaches struct {
	services cache.Indexer // *cachedService by namespace/name
	slices   cache.Indexer // *cachedSlice, indexed by byServiceIndex
}

// service returns the record of the Service key, nil when the cache has none.
func (c serviceCaches) service(key string) *cachedService {
	obj, ok, _ := c.services.GetByKey(key)
	if !ok {
		return nil
	}
	svc, _ := obj.(*cachedService)
	return svc
}

// serviceKeys returns the namespace/name of every cached Service.
func (c serviceCaches) serviceKeys() []string { return c.services.ListKeys() }

// Prestart starts the Service and EndpointSlice informers without waiting for them,
// so that their initial lists download while the caller does other work (the agent
// loads and verifies its BPF programs meanwhile); events queue as they do in Run,
// which then waits for the caches. Call once, before Run; Run calls it if nobody did.
func (w *Watcher) Prestart(ctx context.Context) {
	w.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	w.started = time.Now()
	w.caches, w.cached = w.startCaches(ctx, w.queue)
}

// startCaches starts the Service and EndpointSlice informers, each event queueing
// its Service's key, and returns their caches and what tells they have synced.
func (w *Watcher) startCaches(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string]) (serviceCaches, []cache.InformerSynced) {
	transform := cacheTransform(w.o.NodeName)
	svcInf, sliceInf := kube.NewInformer(w.cs, kube.Services, transform), kube.NewInformer(w.cs, kube.EndpointSlices, transform)
	_ = sliceInf.AddIndexers(cache.Indexers{byServiceIndex: sliceServiceKey})
	enqueue := func(obj any) {
		if key, ok := eventKey(obj); ok {
			w.eventSeen(key)
			queue.Add(key)
		}
	}
	// An update queues the old object's Service too: a slice relabelled to another
	// Service (kubernetes.io/service-name) leaves the first, which would otherwise
	// keep its backends until the next resync.
	update := func(o, n any) {
		if ko, ok := eventKey(o); ok {
			if kn, ok := eventKey(n); !ok || kn != ko {
				enqueue(o)
			}
		}
		enqueue(n)
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: update, DeleteFunc: enqueue}
	_, _ = svcInf.AddEventHandler(handler)
	_, _ = sliceInf.AddEventHandler(handler)
	go svcInf.Run(ctx.Done())
	go sliceInf.Run(ctx.Done())
	return serviceCaches{services: svcInf.GetIndexer(), slices: sliceInf.GetIndexer()},
		[]cache.InformerSynced{svcInf.HasSynced, sliceInf.HasSynced}
}

// sync applies the Service key as the caches have it: deleted, or its desired
// frontends from the Service and its EndpointSlices. A Service too large for the
// datapath's maps (ErrServiceTooLarge) is refused whole: whatever of it was
// programmed is removed, nothing else is, and the error says so (then, as any
// failed sync, it is logged, reported and retried with backoff).
func (w *Watcher) sync(c serviceCaches, key string) error {
	svc := c.service(key)
	if svc == nil {
		w.syncHealth(key, nil, nil)
		return w.m.Apply(key, nil) // deleted
	}
	objs, err := c.slices.ByIndex(byServiceIndex, key)
	if err != nil {
		return err
	}
	slices := make([]*cachedSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*cachedSlice); ok {
			slices = append(slices, s)
		}
	}
	o := w.o
	o.MaxFrontends, o.MaxSlots = w.m.maxFrontends, w.m.maxSlots
	fes, err := desired(svc, slices, o)
	if err != nil {
		w.syncHealth(key, nil, nil) // nothing of it is served here
		return errors.Join(err, w.m.Apply(key, nil))
	}
	w.syncHealth(key, svc, slices)
	return w.m.Apply(key, fes)
}

// firstPass syncs every Service synchronously, so Prune knows every Service has
// been seen, prunes what none claims, and closes Synced. listed is how long the
// caches took to sync (logged with the pass's own time: an agent's start waits for both).
func (w *Watcher) firstPass(c serviceCaches, listed time.Duration) {
	start := time.Now()
	all := c.serviceKeys()
	for _, key := range all {
		if err := w.sync(c, key); err != nil {
			w.log.Error("sync service", "service", key, "err", err)
			w.report(err)
		} else {
			w.written(key)
		}
	}
	if err := w.m.Prune(); err != nil {
		w.log.Error("prune services", "err", err)
		w.report(err)
	}
	if w.pruned != nil {
		w.pruned()
	}
	_, frontends, backends := w.m.Counts()
	w.log.Info("services programmed", "services", len(all), "frontends", frontends, "backends", backends,
		"listed", listed.Round(time.Millisecond), "took", time.Since(start).Round(time.Millisecond))
	w.report(nil)
	close(w.synced)
}

// processNext syncs the next queued Service, retrying it with backoff on error;
// false once the queue is shut down.
func (w *Watcher) processNext(queue workqueue.TypedRateLimitingInterface[string], c serviceCaches) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	err := w.sync(c, key)
	for _, other := range w.m.Reclaims() { // a frontend they claim was let go by its taker
		queue.Add(other)
	}
	if held := (*HeldError)(nil); errors.As(err, &held) && err == error(held) {
		// Only externalIPs another Service holds: nothing to retry (Reclaims hands
		// the Service back when the holder lets go), nothing wrong with this node.
		w.log.Warn("sync service", "service", key, "err", err)
		err = nil
	}
	w.report(err)
	if err != nil {
		w.log.Error("sync service", "service", key, "err", err)
		queue.AddRateLimited(key)
	} else {
		queue.Forget(key)
		w.written(key)
	}
	return true
}

// resync queues, every resyncInterval, every Service the cluster has and every
// Service the Manager has programmed: a Service deleted without its event being
// applied is in the second set only, and its sync removes it.
func (w *Watcher) resync(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], list func() []string) {
	t := time.NewTicker(resyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, key := range resyncKeys(list, w.m.ServiceNames()) {
			queue.Add(key)
		}
	}
}

// resyncKeys is the union of the Services list returns and programmed.
func resyncKeys(list func() []string, programmed []string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(key string) {
		if !seen[key] {
			seen[key] = true
			out = append(out, key)
		}
	}
	for _, key := range list() {
		add(key)
	}
	for _, key := range programmed {
		add(key)
	}
	return out
}

// eventKey returns the namespace/name of the Service an event is about.
func eventKey(obj any) (string, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	switch o := obj.(type) {
	case *cachedService:
		return o.namespace + "/" + o.name, true
	case *cachedSlice:
		return o.service, o.service != ""
	}
	return "", false
}

// sliceServiceKey indexes an EndpointSlice by its kubernetes.io/service-name label.
func sliceServiceKey(obj any) ([]string, error) {
	s, ok := obj.(*cachedSlice)
	if !ok || s.service == "" {
		return nil, nil
	}
	return []string{s.service}, nil
}
