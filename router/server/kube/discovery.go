package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/router"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Registry is what discovery changes: the live router's worker registration (serve passes its
// *server.Server). Its methods are called from informer and registration goroutines
// concurrently.
type Registry interface {
	// AddWorker registers a worker (reading its dp_size under --dp-aware, which may wait
	// while the worker starts, until ctx is done) and returns its dp_size. source is
	// "discovery".
	AddWorker(ctx context.Context, url string, role router.Role, port *int, source string) (int, error)
	// RemoveWorker takes a worker out of routing; requests in flight to it finish.
	RemoveWorker(url, source string) error
	// DiscoveryEvent counts a pod added, removed or skipped, for role.
	DiscoveryEvent(role router.Role, event string)
}

// Config is the discovery part of serve's settings (sgl-router's flags and meanings).
type Config struct {
	// PD watches prefill pods (PrefillSelector) and decode pods (DecodeSelector); otherwise
	// regular ones (Selector).
	PD bool
	// Selector, PrefillSelector and DecodeSelector are k=v labels a role's pods all carry
	// (--selector, --prefill-selector, --decode-selector).
	Selector, PrefillSelector, DecodeSelector []string
	// Port is the worker port on every pod (--service-discovery-port).
	Port int
	// BootstrapPortAnnotation names the prefill pods' bootstrap-port annotation
	// (--bootstrap-port-annotation); a pod without it has no bootstrap port.
	BootstrapPortAnnotation string
	// Namespace is where pods are watched (--service-discovery-namespace); "": every
	// namespace when the router may list pods cluster-wide, else its own.
	Namespace string
	// Kubeconfig is --kubeconfig; "": $KUBECONFIG, ~/.kube/config, else in-cluster.
	Kubeconfig string
}

// roleSelector is one role's label selector (regular; or prefill and decode).
type roleSelector struct {
	role router.Role
	sel  labels.Selector
}

// podDiscovery turns pods into workers. Build it with newPodDiscovery; Run it once.
type podDiscovery struct {
	client     podClient
	namespace  string // "" = all namespaces
	port       int
	annotation string
	roles      []roleSelector
	workers    Registry
	log        *slog.Logger
	resync     time.Duration

	mu      sync.Mutex
	pods    map[string]*podWorker // role/namespace/name → its worker
	skipped map[string]string     // role/namespace/name → why it was last skipped (logged once per reason)
	wg      sync.WaitGroup        // registrations in flight
}

// podWorker is one pod's worker: being registered (added false) or registered.
type podWorker struct {
	url    string
	port   *int
	added  bool
	cancel context.CancelFunc // stops a registration still waiting for dp_size
}

// discoveryResync is how often informers replay every pod, so a pod whose registration
// failed (e.g. its dp_size could not be read) is tried again.
const discoveryResync = 30 * time.Second

// discoverySyncTimeout bounds serve's start waiting for the first list of pods (an API server
// that cannot be reached fails the start rather than leaving a router with no workers).
const discoverySyncTimeout = 60 * time.Second

// newPodDiscovery reads the discovery settings of cfg.
func newPodDiscovery(cfg Config, client podClient, namespace string, workers Registry, log *slog.Logger) (*podDiscovery, error) {
	d := &podDiscovery{client: client, namespace: namespace, port: cfg.Port,
		annotation: cfg.BootstrapPortAnnotation, workers: workers, log: log, resync: discoveryResync,
		pods: map[string]*podWorker{}, skipped: map[string]string{}}
	add := func(role router.Role, flag string, kvs []string) error {
		set := labels.Set{}
		for _, kv := range kvs {
			k, v, _ := strings.Cut(kv, "=")
			set[k] = v
		}
		sel, err := labels.ValidatedSelectorFromSet(set)
		if err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
		d.roles = append(d.roles, roleSelector{role, sel})
		return nil
	}
	var err error
	if cfg.PD {
		err = errors.Join(add(router.Prefill, "--prefill-selector", cfg.PrefillSelector), add(router.Decode, "--decode-selector", cfg.DecodeSelector))
	} else {
		err = add(router.Regular, "--selector", cfg.Selector)
	}
	return d, err
}

// Run watches pods until ctx is done. It returns once every informer has listed the pods
// (their registrations then run on their own), or ctx's error; stopped, it waits for the
// registrations in flight. Call stop after cancelling ctx.
func (d *podDiscovery) Run(ctx context.Context) (stop func(), err error) {
	ictx, cancel := context.WithCancel(ctx)
	var informers []cache.SharedIndexInformer
	var wg sync.WaitGroup
	for _, rs := range d.roles {
		sel, ns := rs.sel.String(), d.namespace
		// A shared informer over the role's pods only: list + watch with the selector on the
		// server side, resync every d.resync.
		inf := cache.NewSharedIndexInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = sel
				return d.client.List(ctx, ns, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = sel
				return d.client.Watch(ctx, ns, o)
			},
		}, &corev1.Pod{}, d.resync, cache.Indexers{})
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { d.sync(ctx, rs, obj, false) },
			UpdateFunc: func(_, obj any) { d.sync(ctx, rs, obj, false) },
			DeleteFunc: func(obj any) { d.sync(ctx, rs, obj, true) },
		}); err != nil {
			cancel()
			return nil, err
		}
		wg.Add(1)
		go func() { defer wg.Done(); inf.RunWithContext(ictx) }()
		informers = append(informers, inf)
	}
	stop = func() {
		cancel()
		wg.Wait()
		d.wg.Wait()
	}
	wctx, wcancel := context.WithTimeout(ctx, discoverySyncTimeout)
	defer wcancel()
	for i, inf := range informers {
		if !cache.WaitForCacheSync(wctx.Done(), inf.HasSynced) {
			stop()
			return nil, fmt.Errorf("service discovery: listing %s pods did not finish within %v: %w", d.roles[i].role, discoverySyncTimeout, context.Cause(wctx))
		}
	}
	return stop, nil
}

// sync brings one pod's worker in line with the pod: registered while the pod is eligible,
// removed otherwise. Deleted pods arrive as the pod (or a tombstone) with deleted set.
func (d *podDiscovery) sync(ctx context.Context, rs roleSelector, obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if pod.DeletionTimestamp != nil {
		deleted = true
	}
	key := rs.role.String() + "/" + pod.Namespace + "/" + pod.Name
	url, port, why := d.describe(rs, pod)
	if deleted {
		why = "pod deleted"
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	cur := d.pods[key]
	if why != "" {
		if cur != nil {
			d.dropLocked(key, cur, rs.role, why)
		}
		if deleted {
			delete(d.skipped, key)
		}
		return
	}
	if cur != nil {
		if cur.url == url && samePort(cur.port, port) {
			return
		}
		d.dropLocked(key, cur, rs.role, "address changed")
	}
	pctx, cancel := context.WithCancel(ctx)
	pw := &podWorker{url: url, port: port, cancel: cancel}
	d.pods[key] = pw
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		dp, err := d.workers.AddWorker(pctx, url, rs.role, port, "discovery")
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.pods[key] != pw { // the pod went away while its worker was being registered
			if err == nil {
				_ = d.workers.RemoveWorker(url, "discovery")
				d.workers.DiscoveryEvent(rs.role, "removed")
			}
			return
		}
		if err != nil {
			delete(d.pods, key) // tried again at the next event or resync
			d.skipLocked(key, rs.role, pod, fmt.Sprintf("registering %s failed: %v", router.RedactURL(url), err))
			return
		}
		pw.added = true
		delete(d.skipped, key)
		d.workers.DiscoveryEvent(rs.role, "added")
		d.log.Info("service discovery: pod added", "pod", pod.Namespace+"/"+pod.Name, "role", rs.role.String(), "url", url, "bootstrap_port", portString(port), "dp_size", dp)
	}()
}

// describe returns the worker a pod stands for, or why it is not (yet) one. A malformed
// bootstrap annotation is logged and counted as a skipped pod.
func (d *podDiscovery) describe(rs roleSelector, pod *corev1.Pod) (url string, port *int, why string) {
	switch {
	case !rs.sel.Matches(labels.Set(pod.Labels)):
		return "", nil, "labels no longer match " + rs.sel.String()
	case pod.Status.Phase != corev1.PodRunning:
		return "", nil, "pod is " + string(pod.Status.Phase)
	case !podReady(pod):
		return "", nil, "pod is not ready"
	case pod.Status.PodIP == "":
		return "", nil, "pod has no IP"
	}
	if rs.role == router.Prefill {
		if v, ok := pod.Annotations[d.annotation]; ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 1 || n > 65535 {
				why := fmt.Sprintf("annotation %s=%q is not a port in [1,65535]", d.annotation, v)
				d.mu.Lock()
				d.skipLocked(rs.role.String()+"/"+pod.Namespace+"/"+pod.Name, rs.role, pod, why)
				d.mu.Unlock()
				return "", nil, why
			}
			port = &n
		}
	}
	return "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(d.port)), port, ""
}

// dropLocked removes a pod's worker (or stops its registration). Requests already sent to it
// finish; the router releases their loads on the removed targets.
func (d *podDiscovery) dropLocked(key string, pw *podWorker, role router.Role, why string) {
	pw.cancel()
	delete(d.pods, key)
	if !pw.added {
		return
	}
	if err := d.workers.RemoveWorker(pw.url, "discovery"); err != nil {
		d.log.Warn("service discovery: removing worker failed", "pod", key, "url", router.RedactURL(pw.url), "err", err)
		return
	}
	d.workers.DiscoveryEvent(role, "removed")
	d.log.Info("service discovery: pod removed", "pod", strings.SplitN(key, "/", 2)[1], "role", role.String(), "url", router.RedactURL(pw.url), "reason", why)
}

// skipLocked logs (WARN) and counts a pod that cannot become a worker, once per reason.
func (d *podDiscovery) skipLocked(key string, role router.Role, pod *corev1.Pod, why string) {
	if d.skipped[key] == why {
		return
	}
	d.skipped[key] = why
	d.workers.DiscoveryEvent(role, "skipped")
	d.log.Warn("service discovery: pod skipped", "pod", pod.Namespace+"/"+pod.Name, "role", role.String(), "reason", why)
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func samePort(a, b *int) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func portString(p *int) string {
	if p == nil {
		return "none"
	}
	return strconv.Itoa(*p)
}

// Start connects to the API server (Config.Kubeconfig) and runs service discovery until ctx is
// done, adding and removing workers in reg. It returns once every role's pods have been
// listed (their registrations then run on their own), or an error; call stop after
// cancelling ctx: it waits for the informers and the registrations in flight.
func Start(ctx context.Context, cfg Config, reg Registry, log *slog.Logger) (stop func(), err error) {
	client, own, err := kubeClient(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	ns, err := discoveryNamespace(ctx, client, cfg.Namespace, own)
	if err != nil {
		return nil, err
	}
	d, err := newPodDiscovery(cfg, client, ns, reg, log)
	if err != nil {
		return nil, err
	}
	where := ns
	if where == "" {
		where = "all namespaces"
	}
	for _, rs := range d.roles {
		log.Info("service discovery: watching pods", "namespace", where, "role", rs.role.String(), "selector", rs.sel.String(), "port", d.port)
	}
	return d.Run(ctx)
}
