package main

import (
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/pdrouter/pdrouter"

// importRule is one row of ARCHITECTURE.md §2: which repo packages and which third-party module
// prefixes a package may import directly, and which standard-library packages it must not.
type importRule struct {
	repo      []string // repo packages (relative to the module) it may import
	external  []string // third-party import-path prefixes it may import
	forbidStd []string // standard-library prefixes it must not import
	anything  bool     // cmd/router and the demo may import everything
}

var (
	gonum      = []string{"gonum.org/v1/gonum/"}
	prometheus = []string{"github.com/prometheus/"}
	noHTTP     = []string{"net/http"}
)

// importRules mirrors ARCHITECTURE.md §2. A package missing here fails the test: add its row to
// the architecture first, then here.
var importRules = map[string]importRule{
	"router":        {repo: []string{"router/tree", "router/kvindex"}, forbidStd: noHTTP},
	"router/tree":   {forbidStd: noHTTP},
	"router/wire":   {forbidStd: noHTTP},
	"router/server": {repo: []string{"router", "router/wire", "router/server/internal/h1", "router/kvindex", "router/kvevents", "router/tokenize"}, external: append([]string{"go.opentelemetry.io/otel"}, prometheus...)},
	// The precise prefix index and SGLang's hash chain: pure, stdlib only.
	"router/kvindex": {forbidStd: noHTTP},
	// Live KV-event subscription: ZeroMQ (pure Go) and msgpack.
	"router/kvevents": {repo: []string{"router/kvindex"}, external: append([]string{"github.com/go-zeromq/zmq4", "github.com/vmihailenco/msgpack/"}, prometheus...), forbidStd: noHTTP},
	// The real tokenizer and chat templates (a Jinja engine).
	"router/tokenize": {external: []string{"github.com/ardanlabs/jinja", "golang.org/x/text/"}, forbidStd: noHTTP},
	"workloads":       {repo: []string{"router/wire"}, external: gonum},
	"reports":         {external: []string{"gonum.org/v1/gonum/", "gonum.org/v1/plot"}},
	// sim/internal/heapq is the (at, seq) min-heap of sim and sim/engine: stdlib only.
	"sim/internal/heapq": {forbidStd: noHTTP},
	"sim/engine":         {repo: []string{"sim/internal/heapq"}, external: gonum, forbidStd: noHTTP},
	"sim":                {repo: []string{"router", "router/wire", "router/kvindex", "sim/engine", "sim/internal/heapq", "workloads", "reports"}, external: gonum, forbidStd: noHTTP},
	"sim/validate":       {repo: []string{"router", "sim", "sim/engine", "workloads", "reports"}, external: gonum, forbidStd: noHTTP}, // gonum: the fit's linear algebra
	// sim/plan is the plan of ARCHITECTURE.md's sim row (`router sim plan`), a package of its own
	// over sim's runs and sweeps: sim's imports and sim itself, no HTTP.
	"sim/plan": {repo: []string{"sim", "sim/engine", "workloads", "reports"}, forbidStd: noHTTP},
	// fakeworker also uses golang.org/x/sys for a timerfd (precise engine-loop wake-ups).
	"fakeworker":               {repo: []string{"sim/engine", "router/wire", "router/kvindex", "router/tokenize", "workloads"}, external: append([]string{"golang.org/x/sys/", "github.com/go-zeromq/zmq4", "github.com/vmihailenco/msgpack/"}, prometheus...)},
	"bench":                    {repo: []string{"workloads", "reports", "router/wire"}, external: []string{"github.com/tsenart/vegeta/"}},
	"router/server/kube":       {repo: []string{"router"}, external: []string{"k8s.io/"}}, // client-go, API types; not router/server (a Registry of its own)
	"cmd/router":               {anything: true},
	"cmd/router/internal/demo": {anything: true},

	// router/server/internal/h1 is the inference legs' HTTP/1.1 transport: stdlib, and httpguts
	// to validate request headers as net/http does.
	"router/server/internal/h1": {external: []string{"golang.org/x/net/http/httpguts"}},

	// internal/testutil holds test helpers shared across packages' tests: stdlib and testify,
	// no repo package, so any package's tests may import it without a cycle or a layer break.
	"internal/testutil": {external: []string{"github.com/stretchr/testify/"}},
}

// isStd reports whether an import path belongs to the standard library (no dot in its first
// element), the rule go list itself uses.
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func hasPrefix(path string, prefixes []string) bool {
	for _, p := range prefixes {
		if path == strings.TrimSuffix(p, "/") || strings.HasPrefix(path, p) ||
			(!strings.HasSuffix(p, "/") && strings.HasPrefix(path, p+"/")) {
			return true
		}
	}
	return false
}

// checkImports returns one message per violation of rules by pkg importing imports.
func checkImports(pkg string, imports []string) []string {
	rule, ok := importRules[pkg]
	if !ok {
		return []string{pkg + ": no import rule; add the package to ARCHITECTURE.md §2 and importRules"}
	}
	if rule.anything {
		return nil
	}
	var bad []string
	for _, imp := range imports {
		switch {
		case strings.HasPrefix(imp, module+"/"):
			rel := strings.TrimPrefix(imp, module+"/")
			allowed := false
			for _, r := range rule.repo {
				if rel == r {
					allowed = true
				}
			}
			if !allowed {
				bad = append(bad, pkg+" must not import "+rel)
			}
		case isStd(imp):
			if hasPrefix(imp, rule.forbidStd) {
				bad = append(bad, pkg+" must not import "+imp)
			}
		default:
			if !hasPrefix(imp, rule.external) {
				bad = append(bad, pkg+" must not import "+imp)
			}
		}
	}
	return bad
}

func TestImportBoundaries(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \",\"}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err, "go list failed")
	var violations []string
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, imports, _ := strings.Cut(line, " ")
		pkg := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		var list []string
		if imports != "" {
			list = strings.Split(imports, ",")
		}
		violations = append(violations, checkImports(pkg, list)...)
		seen++
	}
	sort.Strings(violations)
	require.Empty(t, violations, "import boundaries of ARCHITECTURE.md §2 violated")
	require.Positive(t, seen)
}

// TestImportRulesCatchViolations shows the checker is not vacuous.
func TestImportRulesCatchViolations(t *testing.T) {
	require.NotEmpty(t, checkImports("router", []string{"net/http"}))
	require.NotEmpty(t, checkImports("router", []string{"net/http/httputil"}))
	require.NotEmpty(t, checkImports("router", []string{module + "/router/wire"}))
	require.NotEmpty(t, checkImports("router/wire", []string{"github.com/spf13/cobra"}))
	require.NotEmpty(t, checkImports("workloads", []string{"github.com/spf13/pflag"}))
	require.NotEmpty(t, checkImports("bench", []string{module + "/sim"}))
	require.NotEmpty(t, checkImports("fakeworker", []string{module + "/router"}))
	require.NotEmpty(t, checkImports("sim/engine", []string{"net/http"}))
	require.NotEmpty(t, checkImports("router/server/internal/h1", []string{"golang.org/x/net/http2"}))
	require.NotEmpty(t, checkImports("router/server/internal/h1", []string{module + "/router"}))
	require.NotEmpty(t, checkImports("router/extra", nil))
	require.Empty(t, checkImports("router", []string{"time", "math/rand/v2", module + "/router/tree"}))
	require.Empty(t, checkImports("reports", []string{"gonum.org/v1/plot/vg", "gonum.org/v1/gonum/stat"}))
	require.Empty(t, checkImports("cmd/router", []string{module + "/sim", "github.com/spf13/cobra"}))
}
