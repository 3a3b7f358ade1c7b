package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/router/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
)

// The Kubernetes API here is client-go's fake clientset (no API server can run in unit
// tests); the informers watching it are the real ones serve uses. The workers are real HTTP
// servers, one per pod, each on its own loopback address (127.0.0.N) and the one port that
// --service-discovery-port names for every pod. The registry is the real *server.Server, as
// serve wires it, so the views it serves show what discovery did (only the tests import
// router/server).

var _ Registry = (*server.Server)(nil)

// settings is the discovery part of cfg, as cmd/router maps it.
func settings(cfg server.Config) Config {
	return Config{PD: cfg.PDDisaggregation, Selector: cfg.Selector, PrefillSelector: cfg.PrefillSelector,
		DecodeSelector: cfg.DecodeSelector, Port: cfg.ServiceDiscoveryPort, BootstrapPortAnnotation: cfg.BootstrapPortAnnotation,
		Namespace: cfg.ServiceDiscoveryNamespace, Kubeconfig: cfg.Kubeconfig}
}

// fakePods is podClient over the fake clientset.
type fakePods struct{ cs *fake.Clientset }

func (f fakePods) List(ctx context.Context, ns string, o metav1.ListOptions) (*corev1.PodList, error) {
	return f.cs.CoreV1().Pods(ns).List(ctx, o)
}

func (f fakePods) Watch(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
	return f.cs.CoreV1().Pods(ns).Watch(ctx, o)
}

// lockedBuffer is a log sink safe for the concurrent writes of informers and handlers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// podWorkers serves one handler on 127.0.0.2…127.0.0.(n+1), all on the same port.
func podWorkers(t *testing.T, n int, h http.Handler) (ips []string, port int) {
	t.Helper()
	for try := 0; try < 20; try++ {
		first, err := net.Listen("tcp", "127.0.0.2:0")
		require.NoError(t, err)
		port = first.Addr().(*net.TCPAddr).Port
		lns := []net.Listener{first}
		for i := 3; i <= n+1; i++ {
			ln, err := net.Listen("tcp", net.JoinHostPort(fmt.Sprintf("127.0.0.%d", i), strconv.Itoa(port)))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		if len(lns) < n {
			for _, ln := range lns {
				ln.Close()
			}
			continue // the port is taken on another address: pick another
		}
		ips = nil
		for _, ln := range lns {
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { srv.Close() })
			ips = append(ips, ln.Addr().(*net.TCPAddr).IP.String())
		}
		return ips, port
	}
	t.Fatal("no port free on every loopback address")
	return nil, 0
}

// discoveryRig is a router (in-process server behind httptest) fed by podDiscovery.
type discoveryRig struct {
	t      *testing.T
	client *fake.Clientset
	srv    *server.Server
	http   *httptest.Server
	log    *lockedBuffer
	reg    *promText
}

// promText scrapes the server's metrics handler.
type promText struct{ h http.Handler }

func (p *promText) get(t *testing.T) string {
	rec := httptest.NewRecorder()
	p.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Body.String()
}

func newDiscoveryRig(t *testing.T, cfg server.Config) *discoveryRig {
	t.Helper()
	cfg.ServiceDiscovery = true
	require.NoError(t, cfg.Validate())
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	cfg.Seed = new(int64(1))
	s, err := server.New(server.Options{Config: cfg, Logger: logger})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, s.Start(ctx))
	client := fake.NewClientset()
	d, err := newPodDiscovery(settings(cfg), fakePods{client}, "pods", s, logger)
	require.NoError(t, err)
	d.resync = time.Second // client-go's minimum
	stop, err := d.Run(ctx)
	require.NoError(t, err)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() { hs.Close(); cancel(); stop(); s.Wait() })
	return &discoveryRig{t: t, client: client, srv: s, http: hs, log: logs, reg: &promText{s.MetricsHandler()}}
}

type podSpec struct {
	name, ip    string
	labels      map[string]string
	annotations map[string]string
	ready       bool
}

func (p podSpec) pod() *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: "pods", Labels: p.labels, Annotations: p.annotations},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	if p.ready {
		pod.Status.Phase = corev1.PodRunning
		pod.Status.PodIP = p.ip
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	return pod
}

func (r *discoveryRig) create(p podSpec) {
	_, err := r.client.CoreV1().Pods("pods").Create(context.Background(), p.pod(), metav1.CreateOptions{})
	require.NoError(r.t, err)
}

func (r *discoveryRig) update(p podSpec) {
	_, err := r.client.CoreV1().Pods("pods").Update(context.Background(), p.pod(), metav1.UpdateOptions{})
	require.NoError(r.t, err)
}

func (r *discoveryRig) delete(name string) {
	require.NoError(r.t, r.client.CoreV1().Pods("pods").Delete(context.Background(), name, metav1.DeleteOptions{}))
}

// workers returns /workers as url → entry.
func (r *discoveryRig) workers() map[string]map[string]any {
	resp, err := http.Get(r.http.URL + "/workers")
	require.NoError(r.t, err)
	defer resp.Body.Close()
	var out struct {
		Workers []map[string]any `json:"workers"`
	}
	require.NoError(r.t, json.NewDecoder(resp.Body).Decode(&out))
	m := map[string]map[string]any{}
	for _, w := range out.Workers {
		m[w["url"].(string)] = w
	}
	return m
}

// waitWorkers waits (bounded) until /workers lists exactly urls.
func (r *discoveryRig) waitWorkers(msg string, urls ...string) map[string]map[string]any {
	r.t.Helper()
	var got map[string]map[string]any
	ok := assert.Eventually(r.t, func() bool {
		got = r.workers()
		if len(got) != len(urls) {
			return false
		}
		for _, u := range urls {
			if got[u] == nil {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, msg)
	if !ok {
		r.t.Fatalf("%s: /workers has %v, want %v; log:\n%s", msg, keys(got), urls, r.log.String())
	}
	return got
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func (r *discoveryRig) counter(role, event string) string {
	line := fmt.Sprintf(`pdrouter_discovery_events_total{event=%q,role=%q} `, event, role)
	for _, l := range strings.Split(r.reg.get(r.t), "\n") {
		if strings.HasPrefix(l, line) {
			return strings.TrimPrefix(l, line)
		}
	}
	return "absent"
}

// PD mode: pods are added when Running+Ready with an IP, follow relabelling, readiness and
// deletion; the bootstrap annotation is read when present, null when absent, and a malformed
// one skips the pod with a WARN naming it. A request in flight to a removed pod finishes and
// loads return to zero.
func TestDiscoveryPDPodsFollowTheirState(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 16)
	var blockMu sync.Mutex
	block := map[string]bool{} // worker IPs whose /generate waits for release
	ips, port := podWorkers(t, 4, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		host, _, _ := net.SplitHostPort(r.Host)
		blockMu.Lock()
		b := block[host]
		blockMu.Unlock()
		if r.URL.Path == "/generate" && b {
			arrived <- struct{}{}
			<-release
		}
		_, _ = w.Write([]byte(`{"text":"ok","meta_info":{}}`))
	}))
	cfg := server.DefaultConfig()
	cfg.PDDisaggregation = true
	cfg.PrefillSelector = []string{"app=sglang-prefill"}
	cfg.DecodeSelector = []string{"app=sglang-decode"}
	cfg.ServiceDiscoveryPort = port
	r := newDiscoveryRig(t, cfg)
	url := func(ip string) string { return "http://" + net.JoinHostPort(ip, strconv.Itoa(port)) }
	pre := map[string]string{"app": "sglang-prefill"}
	dec := map[string]string{"app": "sglang-decode"}
	ann := func(v string) map[string]string { return map[string]string{"sglang.ai/bootstrap-port": v} }

	p1 := podSpec{name: "p1", ip: ips[0], labels: pre, annotations: ann("9001"), ready: true}
	r.create(p1)
	got := r.waitWorkers("a ready prefill pod is added", url(ips[0]))
	assert.Equal(t, "prefill", got[url(ips[0])]["worker_type"])
	assert.EqualValues(t, 9001, got[url(ips[0])]["bootstrap_port"])

	d1 := podSpec{name: "d1", ip: ips[1], labels: dec}
	r.create(d1) // Pending, no IP
	r.waitWorkers("a pending pod is not a worker", url(ips[0]))
	d1.ready = true
	r.update(d1)
	got = r.waitWorkers("made ready, it is added", url(ips[0]), url(ips[1]))
	assert.Equal(t, "decode", got[url(ips[1])]["worker_type"])

	d1.labels = map[string]string{"app": "other"}
	r.update(d1)
	r.waitWorkers("relabelled away, it is removed", url(ips[0]))
	d1.labels = dec
	r.update(d1)
	r.waitWorkers("labels back, it is added", url(ips[0]), url(ips[1]))
	d1.ready = false
	r.update(d1)
	r.waitWorkers("made unready, it is removed", url(ips[0]))
	d1.ready = true
	r.update(d1)
	r.waitWorkers("ready again, it is added", url(ips[0]), url(ips[1]))

	// Annotation absent: added, bootstrap_port null. Malformed: skipped, logged, counted.
	r.create(podSpec{name: "p2", ip: ips[2], labels: pre, ready: true})
	got = r.waitWorkers("no annotation: added", url(ips[0]), url(ips[1]), url(ips[2]))
	assert.Nil(t, got[url(ips[2])]["bootstrap_port"])
	assert.Equal(t, "0", r.counter("prefill", "skipped"))
	r.create(podSpec{name: "p3", ip: ips[3], labels: pre, annotations: ann("boot"), ready: true})
	require.Eventually(t, func() bool { return r.counter("prefill", "skipped") == "1" }, 10*time.Second, 5*time.Millisecond)
	assert.Contains(t, r.log.String(), `msg="service discovery: pod skipped" pod=pods/p3 role=prefill reason="annotation sglang.ai/bootstrap-port=\"boot\" is not a port in [1,65535]"`)
	r.waitWorkers("malformed annotation: skipped", url(ips[0]), url(ips[1]), url(ips[2]))
	assert.Equal(t, 1, strings.Count(r.log.String(), "pod=pods/p3"), "logged once, not at every resync")
	r.delete("p3")
	r.delete("p2")
	r.waitWorkers("p2 deleted", url(ips[0]), url(ips[1]))

	// A request in flight on d1 when d1 goes away finishes; loads come back to zero.
	blockMu.Lock()
	block[ips[1]] = true
	blockMu.Unlock()
	done := make(chan int, 1)
	go func() {
		resp, err := http.Post(r.http.URL+"/generate", "application/json", strings.NewReader(`{"text":"hello"}`))
		if err != nil {
			done <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-arrived
	r.delete("d1")
	// It takes no new request at once, but is shown draining until its request finishes.
	require.Eventually(t, func() bool { return r.workers()[url(ips[1])]["state"] == "draining" }, 10*time.Second, 5*time.Millisecond,
		"d1 deleted while serving: draining")
	got = r.waitWorkers("d1 draining", url(ips[0]), url(ips[1]))
	assert.EqualValues(t, 1, got[url(ips[1])]["load"])
	close(release)
	assert.Equal(t, http.StatusOK, <-done, "the in-flight request finishes")
	r.waitWorkers("d1 drained: gone", url(ips[0]))
	assert.Contains(t, r.log.String(), `msg="worker draining: no new requests; removed once its in-flight requests finish" worker=`+url(ips[1])+
		` role=decode from=healthy to=draining reason="its pod left service discovery"`)
	// The response does not wait for the prefill leg's own end: /get_loads comes back to zero
	// once it has ended too.
	type loads struct {
		Workers []struct {
			Worker string `json:"worker"`
			Load   int64  `json:"load"`
		} `json:"workers"`
	}
	getLoads := func() loads {
		resp, err := http.Get(r.http.URL + "/get_loads")
		require.NoError(t, err)
		defer resp.Body.Close()
		var l loads
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&l))
		return l
	}
	require.Eventually(t, func() bool {
		l := getLoads()
		return len(l.Workers) == 1 && l.Workers[0].Load == 0
	}, 10*time.Second, 5*time.Millisecond, "/get_loads is back to zero")
	assert.Equal(t, url(ips[0]), getLoads().Workers[0].Worker)

	r.delete("p1")
	r.waitWorkers("all gone")
	assert.Equal(t, "3", r.counter("decode", "removed"), "d1 removed when relabelled, when unready and when deleted")
}

// Regular mode with --dp-aware: dp_size is read when a pod is added, and a pod whose server
// never answers does not hold up the others (the startup timeout applies per pod). Deleting
// the stuck pod stops its registration.
func TestDiscoveryRegularDPAwareDoesNotBlock(t *testing.T) {
	ips, port := podWorkers(t, 1, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"dp_size":2,"model_path":"m"}`))
	}))
	cfg := server.DefaultConfig()
	cfg.Selector = []string{"app=sglang", "tier=gpu"}
	cfg.ServiceDiscoveryPort = port
	cfg.DPAware = true
	cfg.WorkerStartupTimeoutSecs = 600
	cfg.WorkerStartupCheckInterval = 1
	r := newDiscoveryRig(t, cfg)
	labels := map[string]string{"app": "sglang", "tier": "gpu"}
	// 127.0.0.99 has nothing listening: its dp_size read retries for up to 600 s.
	r.create(podSpec{name: "stuck", ip: "127.0.0.99", labels: labels, ready: true})
	r.create(podSpec{name: "w1", ip: ips[0], labels: labels, ready: true})
	u := "http://" + net.JoinHostPort(ips[0], strconv.Itoa(port))
	// Under --dp-aware /workers lists one entry per rank, as the Model Gateway does.
	got := r.waitWorkers("the answering pod is added while the other still retries", u+"@0", u+"@1")
	assert.EqualValues(t, 2, got[u+"@0"]["dp_size"])
	assert.Len(t, r.srv.Router().Targets(), 2, "one target per DP rank")
	r.delete("stuck")
	r.create(podSpec{name: "w2", ip: ips[0], labels: map[string]string{"app": "sglang"}, ready: true})
	r.waitWorkers("a pod missing one selector label is not a worker", u+"@0", u+"@1")
	assert.Equal(t, "1", r.counter("regular", "added"))
	assert.Equal(t, "0", r.counter("regular", "skipped"), "the stuck pod was deleted before its registration gave up")
}
