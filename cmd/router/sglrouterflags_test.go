package main

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sglFlag is one flag of today's sgl-router, as testdata/sglrouter_flags.tsv lists it.
type sglFlag struct {
	name     string   // without the dashes
	nargs    string   // 0, 1, + or *
	def      string   // Python repr of the default
	spelling []string // other spellings, without the dashes
}

func readSGLRouterFlags(t *testing.T) []sglFlag {
	t.Helper()
	f, err := os.Open("testdata/sglrouter_flags.tsv")
	require.NoError(t, err)
	defer f.Close()
	var out []sglFlag
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		require.Len(t, cols, 4, "testdata/sglrouter_flags.tsv: %q", line)
		fl := sglFlag{name: strings.TrimPrefix(cols[0], "--"), nargs: cols[1], def: cols[2]}
		for _, s := range strings.Fields(cols[3]) {
			fl.spelling = append(fl.spelling, strings.TrimPrefix(s, "--"))
		}
		out = append(out, fl)
	}
	require.NoError(t, sc.Err())
	require.Greater(t, len(out), 100, "the list of today's sgl-router flags was read")
	return out
}

// unsupportedSection is docs/sgl-router-compat.md's list of the sgl-router flags serve does not
// implement.
func unsupportedSection(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/sgl-router-compat.md")
	require.NoError(t, err)
	const head = "## sgl-router flags pdrouter does not implement"
	_, rest, ok := strings.Cut(string(raw), head)
	require.True(t, ok, "docs/sgl-router-compat.md has a section %q", head)
	if i := strings.Index(rest, "\n#"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// arityOf maps argparse nargs to ignoredSGLangFlags' arity.
func arityOf(nargs string) int {
	switch nargs {
	case "0":
		return 0
	case "1":
		return 1
	}
	return -1
}

// defaultsThatDiffer are the implemented flags whose default is not today's sgl-router's, with
// why (docs/sgl-router-compat.md says the same).
var defaultsThatDiffer = map[string]string{
	"eviction-interval-secs":           "120 s (smg: 60): router sim and serve share the routing defaults; the tuned settings and calibrations were made with 120",
	"worker-startup-check-interval":    "10 s (smg: 30): a starting worker is found up to 20 s sooner",
	"shutdown-timeout-secs":            "30 s (smg's --shutdown-grace-period-secs: 180): Kubernetes kills a pod 30 s after SIGTERM unless told otherwise",
	"request-id-headers":               "smg's None means its common defaults; ours are listed (x-request-id, x-correlation-id, x-trace-id, request-id)",
	"worker-overload-token-usage":      "0, off: smg's None",
	"worker-overload-waiting-requests": "0, off: smg's None",
	"rate-limit-tokens-per-second":     "0, no rate (smg's None means --max-concurrent-requests per second): serve's permits already bound concurrency exactly, and a default rate would newly refuse bursts of deployments that set only --max-concurrent-requests",
	"otlp-traces-endpoint":             "localhost:4318 (smg: localhost:4317): pdrouter exports OTLP/HTTP, whose port is 4318; smg exports OTLP/gRPC",
	"load-monitor-interval":            "500 ms (smg: 10 s, shown as 0 in whole seconds): a report ten seconds old cannot see a queue that built in one; polling costs a GET per worker per interval (measured in docs/engine-load.md)",
}

// Every flag of today's sgl-router is implemented (under its name or as an alias), accepted
// with no effect, or refused as unsupported and listed in docs/sgl-router-compat.md with the reason; and an
// implemented flag keeps its default unless defaultsThatDiffer says why not.
func TestEverySGLRouterFlagIsImplementedOrListed(t *testing.T) {
	fs := newServeCmd().Flags()
	readme := unsupportedSection(t)
	implemented, noEffect, unsupported := 0, 0, 0
	for _, fl := range readSGLRouterFlags(t) {
		for _, name := range append([]string{fl.name}, fl.spelling...) {
			target := name
			if a, ok := serveFlagAliases[name]; ok {
				target = a
			}
			if f := fs.Lookup(target); f != nil {
				implemented++
				if name == fl.name {
					if _, differs := defaultsThatDiffer[target]; !differs {
						assert.Equal(t, pyDefault(fl.def), f.DefValue, "--%s: the default differs from today's sgl-router's; adopt it or say why in defaultsThatDiffer and docs/sgl-router-compat.md", name)
					}
				}
				continue
			}
			if _, ok := switchServeFlags[name]; ok {
				implemented++
				continue
			}
			if _, ok := noEffectSGLangFlags[name]; ok {
				noEffect++
				assert.Equal(t, "0", fl.nargs, "--%s: only switches can be accepted with no effect", name)
				assert.Contains(t, readme, "`--"+name+"`", "docs/sgl-router-compat.md lists --%s as accepted with no effect", name)
				continue
			}
			ig, ok := ignoredSGLangFlags[name]
			if !assert.True(t, ok, "--%s is neither a serve flag, an alias, nor in ignoredSGLangFlags (with the reason in docs/sgl-router-compat.md)", name) {
				continue
			}
			unsupported++
			assert.Equal(t, arityOf(fl.nargs), ig.arity, "--%s takes nargs=%s values in sgl-router", name, fl.nargs)
			assert.Contains(t, readme, "`--"+name+"`", "docs/sgl-router-compat.md's unsupported section lists --%s with the reason", name)
		}
	}
	t.Logf("today's sgl-router flags: %d implemented, %d accepted with no effect, %d unsupported", implemented, noEffect, unsupported)
}

// pyDefault renders a Python default as pflag shows it: None and empty lists as "" or [],
// booleans lower case, strings unquoted.
func pyDefault(repr string) string {
	switch repr {
	case "None", "[]":
		return ""
	case "True", "False":
		return strings.ToLower(repr)
	}
	return strings.Trim(repr, "'")
}

// An alias must not shadow a flag of its own: a setting added under an alias's name would be
// rewritten to the alias's target.
func TestAliasesAreNotFlags(t *testing.T) {
	fs := newServeCmd().Flags()
	for alias, target := range serveFlagAliases {
		assert.Nil(t, fs.Lookup(alias), "--%s is a flag now: drop its alias to --%s", alias, target)
		assert.NotNil(t, fs.Lookup(target), "alias --%s names no flag --%s", alias, target)
	}
	for name := range ignoredSGLangFlags {
		assert.Nil(t, fs.Lookup(name), "--%s is implemented now: drop it from ignoredSGLangFlags and docs/sgl-router-compat.md", name)
	}
}

// The new spellings work and mean the same: smg's names, the converted unit, and the no-effect
// switches.
func TestTodaysSpellings(t *testing.T) {
	cfg, ignored, err := parseServe(t, strings.Fields(`--worker-urls http://a:1 --cache-match-threshold 0.6
		--spill-abs-threshold 9 --spill-rel-threshold 2.5 --shutdown-grace-period-secs 45
		--upstream-pool-idle-timeout-secs 2 --disable-tokenizer-autoload --disable-load-monitoring
		--server-cert-path c.pem --server-key-path k.pem --sticky-key-idle-secs 60 --prefix-token-count 60 --sticky-sessions`)...)
	require.NoError(t, err)
	assert.Equal(t, 0.6, cfg.CacheThreshold)
	assert.Equal(t, 9, cfg.BalanceAbsThreshold)
	assert.Equal(t, 2.5, cfg.BalanceRelThreshold)
	assert.Equal(t, 45, cfg.ShutdownTimeoutSecs)
	assert.Equal(t, 2000, cfg.UpstreamIdleTimeoutMs)
	assert.Equal(t, "c.pem", cfg.TLSCertPath)
	assert.Equal(t, "k.pem", cfg.TLSKeyPath)
	assert.Equal(t, 60, cfg.MaxIdleSecs, "smg's --sticky-key-idle-secs")
	assert.Equal(t, []string{"--prefix-token-count", "--sticky-sessions"}, ignored, "values of an ignored flag are dropped with it")

	_, _, err = parseServe(t, "--upstream-pool-idle-timeout-secs", "x")
	require.ErrorContains(t, err, "upstream-pool-idle-timeout-secs")
}
