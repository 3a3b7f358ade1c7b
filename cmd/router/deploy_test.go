package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/kvevents"
	"github.com/pdrouter/pdrouter/router/kvindex"
	"github.com/pdrouter/pdrouter/router/server"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// serviceMonitor holds the fields of the Prometheus Operator's ServiceMonitor our manifest
// uses; the operator's Go types are not a dependency, so unknown fields still fail the strict
// decode against this subset.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// kustomizeBin returns the kustomize binary `make kustomize` builds (PDROUTER_KUSTOMIZE
// overrides), at the version the Makefile pins; without it the test ends as testutil.NeedTool
// says (skips on a fresh machine, fails under make's test targets).
func kustomizeBin(t *testing.T) string {
	t.Helper()
	mk, err := os.ReadFile("../../Makefile")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^KUSTOMIZE_VERSION \?= (v\S+)$`).FindSubmatch(mk)
	require.NotNil(t, m, "the Makefile pins KUSTOMIZE_VERSION")
	bin := os.Getenv("PDROUTER_KUSTOMIZE")
	if bin == "" {
		home, err := os.UserHomeDir()
		require.NoError(t, err)
		bin = filepath.Join(home, ".cache", "pdrouter", "kustomize-"+string(m[1]), "kustomize")
	}
	if _, err := os.Stat(bin); err != nil {
		testutil.NeedTool(t, "kustomize", fmt.Errorf("kustomize %s not found at %s (%w; PDROUTER_KUSTOMIZE overrides)", m[1], bin, err))
	}
	return bin
}

// kustomizeBuild renders dir with `kustomize build` and decodes every object strictly
// (decodeYAML).
func kustomizeBuild(t *testing.T, dir string) []any {
	t.Helper()
	var stderr strings.Builder
	cmd := exec.Command(kustomizeBin(t), "build", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "kustomize build %s: %s", dir, stderr.String())
	return decodeYAML(t, "kustomize build "+dir, out)
}

// overlay writes a kustomization in a temporary directory with these resources and components
// (paths under the repository root, made relative: kustomize refuses absolute ones) and
// returns the directory.
func overlay(t *testing.T, resources, components []string) string {
	t.Helper()
	dir := t.TempDir()
	rel := func(paths []string) string {
		var b strings.Builder
		for _, p := range paths {
			abs, err := filepath.Abs(filepath.Join("../..", p))
			require.NoError(t, err)
			r, err := filepath.Rel(dir, abs)
			require.NoError(t, err)
			b.WriteString("  - " + r + "\n")
		}
		return b.String()
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n" + rel(resources)
	if len(components) > 0 {
		k += "components:\n" + rel(components)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644))
	return dir
}

// k8sLabels are the recommended labels every object and pod template carries.
var k8sLabels = []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component", "app.kubernetes.io/part-of"}

// objectMeta returns an object's kind and metadata (every type decodeYAML yields).
func objectMeta(t *testing.T, o any) (string, metav1.ObjectMeta) {
	t.Helper()
	switch v := o.(type) {
	case *appsv1.Deployment:
		return "Deployment", v.ObjectMeta
	case *batchv1.Job:
		return "Job", v.ObjectMeta
	case *corev1.Service:
		return "Service", v.ObjectMeta
	case *corev1.ServiceAccount:
		return "ServiceAccount", v.ObjectMeta
	case *corev1.Namespace:
		return "Namespace", v.ObjectMeta
	case *corev1.ConfigMap:
		return "ConfigMap", v.ObjectMeta
	case *corev1.PersistentVolumeClaim:
		return "PersistentVolumeClaim", v.ObjectMeta
	case *rbacv1.Role:
		return "Role", v.ObjectMeta
	case *rbacv1.RoleBinding:
		return "RoleBinding", v.ObjectMeta
	case *serviceMonitor:
		return "ServiceMonitor", v.ObjectMeta
	}
	t.Fatalf("no metadata accessor for %T", o)
	return "", metav1.ObjectMeta{}
}

// rendering is one kustomize build, its objects by kind.
type rendering struct {
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	monitors    []*serviceMonitor
	kinds       map[string]int
}

// checkRendering renders dir and checks what holds of every rendering: the four
// app.kubernetes.io labels on every object and pod template; each Deployment's selector picks
// its own pods; each Service's selector picks exactly the router's pods; each ServiceMonitor's
// selector picks a Service; the namespace, when given, on every namespaced object.
func checkRendering(t *testing.T, dir, namespace string) rendering {
	t.Helper()
	r := rendering{kinds: map[string]int{}}
	for _, o := range kustomizeBuild(t, dir) {
		kind, meta := objectMeta(t, o)
		r.kinds[kind]++
		for _, l := range k8sLabels {
			assert.NotEmpty(t, meta.Labels[l], "%s: %s %s has no %s label", dir, kind, meta.Name, l)
		}
		if namespace != "" && kind != "Namespace" {
			assert.Equal(t, namespace, meta.Namespace, "%s: %s %s", dir, kind, meta.Name)
		}
		switch v := o.(type) {
		case *appsv1.Deployment:
			r.deployments = append(r.deployments, v)
			for _, l := range k8sLabels {
				assert.NotEmpty(t, v.Spec.Template.Labels[l], "%s: %s's pods have no %s label", dir, v.Name, l)
			}
			sel, err := metav1.LabelSelectorAsSelector(v.Spec.Selector)
			require.NoError(t, err)
			assert.True(t, sel.Matches(labels.Set(v.Spec.Template.Labels)), "%s: %s's selector misses its pods", dir, v.Name)
			assert.Len(t, v.Spec.Selector.MatchLabels, 3, "%s: %s selects on name, instance and component", dir, v.Name)
		case *corev1.Service:
			r.services = append(r.services, v)
		case *serviceMonitor:
			r.monitors = append(r.monitors, v)
		}
	}
	for _, svc := range r.services {
		var picked []string
		for _, d := range r.deployments {
			if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
				picked = append(picked, d.Name)
			}
		}
		assert.Equal(t, []string{"pdrouter"}, picked, "%s: Service %s selects the router's pods only", dir, svc.Name)
	}
	for _, sm := range r.monitors {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		require.NoError(t, err)
		n := 0
		for _, svc := range r.services {
			if sel.Matches(labels.Set(svc.Labels)) {
				n++
				assert.Equal(t, sm.Spec.Endpoints[0].Port, svc.Spec.Ports[1].Name, "the monitor scrapes the metrics port")
			}
		}
		assert.Equal(t, 1, n, "%s: ServiceMonitor %s selects the router Service", dir, sm.Name)
	}
	return r
}

// router returns the rendering's router Deployment.
func (r rendering) router(t *testing.T) *appsv1.Deployment {
	t.Helper()
	for _, d := range r.deployments {
		if d.Name == "pdrouter" {
			return d
		}
	}
	t.Fatal("no pdrouter Deployment")
	return nil
}

// kustomize renders the base, every example and the base with the monitoring component; the
// ServiceMonitor (which needs the Prometheus Operator's CRD) is there only where the component
// is included.
func TestKustomizeBaseExamplesAndMonitoringComponent(t *testing.T) {
	base := checkRendering(t, "../../deploy/k8s/base", "")
	assert.Equal(t, map[string]int{"Deployment": 1, "Role": 1, "RoleBinding": 1, "Service": 1, "ServiceAccount": 1}, base.kinds, "the base needs no CRD")

	withMon := checkRendering(t, overlay(t, []string{"deploy/k8s/base"}, []string{"deploy/k8s/components/monitoring"}), "")
	assert.Equal(t, 1, withMon.kinds["ServiceMonitor"], "the component adds the ServiceMonitor")
	delete(withMon.kinds, "ServiceMonitor")
	assert.Equal(t, base.kinds, withMon.kinds, "and nothing else")

	examples, err := filepath.Glob("../../deploy/k8s/examples/*/kustomization.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(examples), 2)
	monitored := map[string]int{}
	for _, k := range examples {
		dir := filepath.Dir(k)
		raw, err := os.ReadFile(k)
		require.NoError(t, err)
		var kz struct {
			Namespace string `json:"namespace"`
		}
		require.NoError(t, yaml.Unmarshal(raw, &kz))
		require.NotEmpty(t, kz.Namespace, "%s sets a namespace", dir)
		r := checkRendering(t, dir, kz.Namespace)
		assert.Equal(t, 1, r.kinds["Namespace"], dir)
		monitored[filepath.Base(dir)] = r.kinds["ServiceMonitor"]
		c := r.router(t).Spec.Template.Spec.Containers[0]
		_, ignored, err := parseServe(t, c.Args[1:]...)
		require.NoError(t, err, "%s: router args %q", dir, c.Args)
		require.Empty(t, ignored)
	}
	assert.Equal(t, map[string]int{"pd-fakeworker": 0, "kv-events": 1}, monitored, "only the example including components/monitoring renders a ServiceMonitor")
}

// The router's pod outlives its shutdown: the grace period exceeds serve's delay (readiness
// failing, still accepting) plus its drain timeout, with room for the exit.
func TestRouterShutdownFitsGracePeriod(t *testing.T) {
	for _, dir := range []string{"../../deploy/k8s/base", "../../deploy/k8s/examples/kv-events"} {
		d := checkRendering(t, dir, "").router(t)
		c := d.Spec.Template.Spec.Containers[0]
		cfg, _, err := parseServe(t, c.Args[1:]...)
		require.NoError(t, err)
		require.Positive(t, cfg.ShutdownDelaySecs, "%s: serve keeps accepting after SIGTERM while the Service drops it", dir)
		require.NotNil(t, d.Spec.Template.Spec.TerminationGracePeriodSeconds, dir)
		grace := *d.Spec.Template.Spec.TerminationGracePeriodSeconds
		assert.GreaterOrEqual(t, grace, int64(cfg.ShutdownDelaySecs+cfg.ShutdownTimeoutSecs+5), "%s: grace period over delay + drain + 5 s", dir)
		probe := c.ReadinessProbe
		assert.Greater(t, cfg.ShutdownDelaySecs, int(probe.PeriodSeconds*probe.FailureThreshold), "%s: readiness fails its threshold within the delay", dir)
	}
}

// The memory limit covers the tree guard as the base's comment computes it: two trees (PD),
// each at --max-tree-total-chars after an eviction plus as much again arriving before the next,
// at 1 byte a character, and 512 Mi for the rest; GOMEMLIMIT sits inside the limit.
func TestRouterMemoryFitsTreeGuard(t *testing.T) {
	d := checkRendering(t, "../../deploy/k8s/base", "").router(t)
	c := d.Spec.Template.Spec.Containers[0]
	cfg, _, err := parseServe(t, c.Args[1:]...)
	require.NoError(t, err)
	require.True(t, cfg.PDDisaggregation)
	limit := c.Resources.Limits.Memory().Value()
	request := c.Resources.Requests.Memory().Value()
	assert.GreaterOrEqual(t, limit, 4*int64(cfg.MaxTreeTotalChars)+512<<20, "limit %d for --max-tree-total-chars %d", limit, cfg.MaxTreeTotalChars)
	assert.GreaterOrEqual(t, request, 2*int64(cfg.MaxTreeTotalChars), "request: both trees at the guard")
	var gomem string
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			gomem = e.Value
		}
	}
	mib, ok := strings.CutSuffix(gomem, "MiB")
	require.True(t, ok, "GOMEMLIMIT %q in MiB", gomem)
	n, err := strconv.ParseInt(mib, 10, 64)
	require.NoError(t, err)
	assert.Less(t, n<<20, limit, "GOMEMLIMIT below the limit")
	assert.Greater(t, n<<20, request, "GOMEMLIMIT above the request")
}

// The images the manifests run are the one `make image` builds (its IMAGE default).
func TestManifestImagesAreMakeImage(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^IMAGE \?= (\S+)$`).FindSubmatch(mk)
	require.NotNil(t, m, "the Makefile names IMAGE")
	image := string(m[1])
	out, err := exec.Command("make", "-s", "-n", "-C", "../..", "image").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "build --build-arg VERSION=", "make image runs an image build of the Dockerfile")
	assert.Contains(t, string(out), "-t "+image+" .")
	var images []string
	for _, o := range decodeManifests(t, "../../deploy/k8s/sim-sweep-job.yaml") {
		if j, ok := o.(*batchv1.Job); ok {
			images = append(images, j.Spec.Template.Spec.Containers[0].Image)
		}
	}
	for _, dir := range []string{"../../deploy/k8s/base", "../../deploy/k8s/examples/pd-fakeworker"} {
		for _, d := range checkRendering(t, dir, "").deployments {
			images = append(images, d.Spec.Template.Spec.Containers[0].Image)
		}
	}
	require.GreaterOrEqual(t, len(images), 5)
	for _, im := range images {
		assert.Equal(t, image, im)
	}
}

// The KV-events example: two router replicas with --kv-events auto and a tokenizer on a mounted
// volume; the prefill workers' --kv-events-config is a zmq publisher the router can dial, on a
// declared port.
func TestKVEventsExample(t *testing.T) {
	r := checkRendering(t, "../../deploy/k8s/examples/kv-events", "pdrouter-kv")
	d := r.router(t)
	require.NotNil(t, d.Spec.Replicas)
	assert.Equal(t, int32(2), *d.Spec.Replicas)
	c := d.Spec.Template.Spec.Containers[0]
	cfg, _, err := parseServe(t, c.Args[1:]...)
	require.NoError(t, err)
	assert.Equal(t, "auto", cfg.KVEvents)
	require.NotEmpty(t, cfg.TokenizerPath)
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || strings.HasPrefix(cfg.TokenizerPath, m.MountPath+"/")
	}
	assert.True(t, mounted, "--tokenizer-path %s is on a mounted volume", cfg.TokenizerPath)
	publishers := 0
	for _, w := range r.deployments {
		if w.Name == "pdrouter" {
			continue
		}
		wc := w.Spec.Template.Spec.Containers[0]
		role := w.Spec.Template.Labels["app.kubernetes.io/component"]
		sel := map[string][]string{"prefill": cfg.PrefillSelector, "decode": cfg.DecodeSelector}[role]
		require.NotEmpty(t, sel, "%s: component %q", w.Name, role)
		for _, kv := range sel {
			k, v, _ := strings.Cut(kv, "=")
			assert.Equal(t, v, w.Spec.Template.Labels[k], "%s pods carry the %s selector", w.Name, role)
		}
		i := indexOf(wc.Args, "--kv-events-config")
		if i < 0 {
			continue
		}
		kc, err := kvevents.ParseConfig(wc.Args[i+1])
		require.NoError(t, err)
		eps, err := kc.Endpoints("http://10.0.0.7:30000", 0)
		require.NoError(t, err, "%s publishes where the router can subscribe", w.Name)
		require.Len(t, eps, 1)
		ports := map[string]bool{}
		for _, p := range wc.Ports {
			ports[strconv.Itoa(int(p.ContainerPort))] = true
		}
		_, port, _ := strings.Cut(strings.TrimPrefix(eps[0].Pub, "tcp://"), ":")
		assert.True(t, ports[port], "%s declares its KV-event port %s", w.Name, port)
		publishers++
	}
	assert.Positive(t, publishers, "some workers publish KV events")
}

// The pd-fakeworker example's router arguments are serve's; its Role grants only
// get/list/watch on pods; its worker pods are what the selectors and port pick.
func TestDeployManifests(t *testing.T) {
	r := checkRendering(t, "../../deploy/k8s/examples/pd-fakeworker", "pdrouter-demo")
	assert.Equal(t, map[string]int{"Namespace": 1, "Deployment": 3, "Role": 1, "RoleBinding": 1, "Service": 1, "ServiceAccount": 1}, r.kinds)
	var role *rbacv1.Role
	for _, o := range kustomizeBuild(t, "../../deploy/k8s/examples/pd-fakeworker") {
		switch v := o.(type) {
		case *rbacv1.Role:
			role = v
		case *rbacv1.RoleBinding:
			assert.Equal(t, "Role", v.RoleRef.Kind)
		}
	}
	routerDep := r.router(t)
	var workers []*appsv1.Deployment
	for _, d := range r.deployments {
		if d != routerDep {
			workers = append(workers, d)
		}
	}
	require.NotNil(t, role)
	require.Len(t, role.Rules, 1, "least privilege: one rule")
	assert.Equal(t, []string{""}, role.Rules[0].APIGroups)
	assert.Equal(t, []string{"pods"}, role.Rules[0].Resources)
	assert.ElementsMatch(t, []string{"get", "list", "watch"}, role.Rules[0].Verbs)

	c := routerDep.Spec.Template.Spec.Containers[0]
	assert.Equal(t, "/liveness", c.LivenessProbe.HTTPGet.Path)
	assert.Equal(t, "/readiness", c.ReadinessProbe.HTTPGet.Path)
	assert.True(t, *routerDep.Spec.Template.Spec.SecurityContext.RunAsNonRoot)
	assert.Equal(t, "pdrouter", routerDep.Spec.Template.Spec.ServiceAccountName)
	// The arguments are serve's: they parse and validate.
	_, _, err := runWithStderr(t, append(append([]string{}, c.Args...), "--print-config")...)
	require.NoError(t, err, "router args %q", c.Args)
	cfg, ignored, err := parseServe(t, c.Args[1:]...)
	require.NoError(t, err)
	require.Empty(t, ignored)
	require.True(t, cfg.ServiceDiscovery)

	// The example's worker pods are what the selectors and port pick.
	sel := map[string][]string{"prefill": cfg.PrefillSelector, "decode": cfg.DecodeSelector}
	require.Len(t, workers, 2)
	for _, w := range workers {
		tmpl := w.Spec.Template
		wc := tmpl.Spec.Containers[0]
		role := wc.Args[2] // fakeworker --mode ROLE
		require.Equal(t, "--mode", wc.Args[1])
		require.NotEmpty(t, sel[role])
		for _, kv := range sel[role] {
			k, v, _ := strings.Cut(kv, "=")
			assert.Equal(t, v, tmpl.Labels[k], "%s pods carry the %s selector", w.Name, role)
		}
		assert.Equal(t, cfg.ServiceDiscoveryPort, int(wc.Ports[0].ContainerPort))
		assert.Equal(t, "/health", wc.ReadinessProbe.HTTPGet.Path)
		if role == "prefill" {
			i := indexOf(wc.Args, "--bootstrap-port")
			require.Positive(t, i)
			assert.Equal(t, wc.Args[i+1], tmpl.Annotations[cfg.BootstrapPortAnnotation], "the bootstrap annotation names the worker's bootstrap port")
		}
		// Every flag given to fakeworker exists.
		fw := newFakeworkerCmd()
		for _, a := range wc.Args[1:] {
			if strings.HasPrefix(a, "--") {
				assert.NotNil(t, fw.Flags().Lookup(strings.TrimPrefix(a, "--")), "fakeworker flag %s", a)
			}
		}
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// The Grafana dashboard parses and every metric it queries is in a running router's /metrics.
func TestGrafanaDashboardQueriesExistingMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/grafana/pdrouter.json")
	require.NoError(t, err)
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	names := map[string]bool{}
	re := regexp.MustCompile(`\b(pdrouter|sgl_router)_[a-z_]+`)
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			for _, m := range re.FindAllString(tg.Expr, -1) {
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					m = strings.TrimSuffix(m, suf)
				}
				names[m] = true
			}
		}
	}
	require.GreaterOrEqual(t, len(names), 10)

	// A PD router in-process; one failed attempt (retried), one streamed request (TTFT, ITL, TPOT:
	// three text events) and one bad request (errors) go through it, so the labelled series exist.
	var calls atomic.Int32 // the decode worker's: its first answer is a 503
	worker := func(failFirst bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			if failFirst && calls.Add(1) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			if strings.Contains(string(b), `"stream":true`) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "data: {\"text\":\"o\",\"meta_info\":{}}\n\ndata: {\"text\":\"ok\"}\n\ndata: {\"text\":\"ok!\"}\n\ndata: [DONE]\n\n")
				return
			}
			_, _ = w.Write([]byte(`{"text":"ok","meta_info":{"prompt_tokens":4,"cached_tokens":0}}`))
		}
	}
	p, d := httptest.NewServer(worker(false)), httptest.NewServer(worker(true))
	defer p.Close()
	defer d.Close()
	cfg := server.DefaultConfig()
	cfg.PDDisaggregation = true
	cfg.RetryInitialBackoffMs = 1
	cfg.Seed = new(int64(1))
	s, err := server.New(server.Options{Config: cfg})
	require.NoError(t, err)
	require.NoError(t, s.Router().AddWorker(router.WorkerSpec{URL: p.URL, Role: router.Prefill}))
	require.NoError(t, s.Router().AddWorker(router.WorkerSpec{URL: d.URL, Role: router.Decode}))
	for _, body := range []string{`{"text":"hello world"}`, `{"text":"hello world","stream":true}`, `{not json`} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/generate", strings.NewReader(body)))
		if body != `{not json` {
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		}
	}
	rec := httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	exposed := rec.Body.String()
	// The KV-event metrics are the subscriber's, registered beside these once a worker publishes;
	// here a subscriber with one target (its series start at 0) stands for that.
	kreg := prom.NewRegistry()
	sub := kvevents.New(kvindex.New(kvindex.Config{}), kvevents.Options{Registerer: kreg})
	defer sub.Close()
	require.NoError(t, sub.Add(kvevents.Endpoint{Target: p.URL + "@0", Pub: "tcp://127.0.0.1:1"}))
	rec = httptest.NewRecorder()
	promhttp.HandlerFor(kreg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	exposed += rec.Body.String()
	var missing []string
	for n := range names {
		if !strings.Contains(exposed, "\n# TYPE "+n+" ") {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	assert.Empty(t, missing, "the dashboard queries metrics the router does not export")
}

// The image's build stage runs the Makefile's build target (CGO off, for a static binary), so
// it builds what `make build` builds; the final stage runs as a non-root user.
func TestDockerfileBuildsWhatMakeBuilds(t *testing.T) {
	raw, err := os.ReadFile("../../Dockerfile")
	require.NoError(t, err)
	var stages [][]string // instructions per FROM
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "FROM ") {
			stages = append(stages, nil)
		}
		require.NotEmpty(t, stages, "instruction before FROM: %s", line)
		stages[len(stages)-1] = append(stages[len(stages)-1], line)
	}
	require.Len(t, stages, 2, "multi-stage: build, then run")
	var run string
	for _, l := range stages[0] {
		if strings.HasPrefix(l, "RUN ") && strings.Contains(l, "make build") {
			run = strings.TrimPrefix(l, "RUN ")
		}
	}
	require.NotEmpty(t, run, "the build stage runs make build")
	assert.Contains(t, run, "CGO_ENABLED=0 ", "a static binary")
	// What that make line runs is the local make build with the same variables.
	args := strings.Fields(strings.ReplaceAll(strings.ReplaceAll(run, "CGO_ENABLED=0 ", ""), "${VERSION}", "v1.2.3"))
	require.Equal(t, "make", args[0])
	out, err := exec.Command("make", append([]string{"-s", "-n", "-C", "../.."}, args[1:]...)...).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Equal(t, "go build -ldflags '-X main.version=v1.2.3' -o /out/router ./cmd/router", strings.TrimSpace(string(out)))
	final := strings.Join(stages[1], "\n")
	assert.Contains(t, final, "COPY --from=build /out/router /router")
	assert.Regexp(t, `(?m)^USER 65532`, final, "non-root")
	assert.Contains(t, stages[1][0], "distroless/static", "a small base without a shell")
}
