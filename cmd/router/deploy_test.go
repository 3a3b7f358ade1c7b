package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// kustomization is the subset of kustomize's file our manifests use, decoded strictly.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Labels     []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels"`
}

// loadKustomization decodes dir's kustomization.yaml strictly and returns the objects of its
// resources (files, or directories holding another kustomization), recursively.
func loadKustomization(t *testing.T, dir string) []any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	var k kustomization
	require.NoError(t, yaml.UnmarshalStrict(raw, &k), dir)
	assert.Equal(t, "Kustomization", k.Kind)
	var objs []any
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		fi, err := os.Stat(p)
		require.NoError(t, err, "%s lists %s", dir, r)
		if fi.IsDir() {
			objs = append(objs, loadKustomization(t, p)...)
		} else {
			objs = append(objs, decodeManifests(t, p)...)
		}
	}
	return objs
}

// Every manifest decodes strictly into its k8s.io/api type; the router's Role grants only
// get/list/watch on pods; its arguments parse as serve's and discover the example's pods.
func TestDeployManifests(t *testing.T) {
	objs := loadKustomization(t, "../../deploy/k8s/examples/pd-fakeworker")
	var routerDep *appsv1.Deployment
	var workers []*appsv1.Deployment
	var role *rbacv1.Role
	kinds := map[string]int{}
	for _, o := range objs {
		switch v := o.(type) {
		case *appsv1.Deployment:
			kinds["Deployment"]++
			if v.Name == "pdrouter" {
				routerDep = v
			} else {
				workers = append(workers, v)
			}
		case *rbacv1.Role:
			kinds["Role"]++
			role = v
		case *rbacv1.RoleBinding:
			kinds["RoleBinding"]++
			assert.Equal(t, "Role", v.RoleRef.Kind)
		case *corev1.Service:
			kinds["Service"]++
		case *corev1.ServiceAccount:
			kinds["ServiceAccount"]++
		case *serviceMonitor:
			kinds["ServiceMonitor"]++
			assert.Equal(t, "metrics", v.Spec.Endpoints[0].Port)
		}
	}
	assert.Equal(t, map[string]int{"Deployment": 3, "Role": 1, "RoleBinding": 1, "Service": 1, "ServiceAccount": 1, "ServiceMonitor": 1}, kinds)
	require.NotNil(t, routerDep)
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
