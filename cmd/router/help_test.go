package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allCommands returns every command of the tree, root included.
func allCommands(c *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{c}
	for _, sub := range c.Commands() {
		out = append(out, allCommands(sub)...)
	}
	return out
}

// Help texts once copied between commands said wrong things: sim's --dp-aware "reads
// /get_server_info" (sim has no live workers), --pd-disaggregation "give --prefill and --decode
// workers" where sim takes counts, sim's --decision-log "same format as router sim", and
// "--seed … (default: random)" where a run is seeded 1. Only serve may say the first three,
// and only serve's seed is random. --seed is one flag type everywhere.
func TestHelpTextsSayTheRightThing(t *testing.T) {
	forbidden := []struct{ phrase, onlyIn string }{
		{"/get_server_info", "serve"},
		{"give --prefill and --decode", "serve"},
		{"same format as router sim", ""},
		{"default: random", ""},
		{"(default: a random seed", "serve"},
	}
	root := newRootCmd()
	seen := 0
	for _, c := range allCommands(root) {
		var buf bytes.Buffer
		c.SetOut(&buf)
		require.NoError(t, c.Help())
		help := buf.String()
		path := c.CommandPath()
		for _, f := range forbidden {
			if f.onlyIn != "" && path == "router "+f.onlyIn {
				continue
			}
			if !strings.Contains(c.Long, f.phrase) { // prose may mention serve's behaviour
				assert.NotContains(t, flagUsages(c), f.phrase, "%s --help", path)
			}
		}
		if fl := c.Flags().Lookup("seed"); fl != nil {
			seen++
			assert.Equal(t, "int", fl.Value.Type(), "%s --seed", path)
			assert.NotEmpty(t, fl.Usage, path)
		}
		assert.NotEmpty(t, help, path)
	}
	assert.GreaterOrEqual(t, seen, 5, "serve, sim, sim sweep, bench, fakeworker, demo take --seed")

	// The shared flags' texts differ where the commands differ.
	sim, _, err := root.Find([]string{"sim"})
	require.NoError(t, err)
	serve, _, err := root.Find([]string{"serve"})
	require.NoError(t, err)
	for _, name := range []string{"dp-aware", "pd-disaggregation", "decision-log", "seed"} {
		assert.NotEqual(t, serve.Flags().Lookup(name).Usage, sim.Flags().Lookup(name).Usage, name)
	}
	assert.Contains(t, serve.Flags().Lookup("dp-aware").Usage, "/get_server_info")
	assert.Contains(t, sim.Flags().Lookup("pd-disaggregation").Usage, "--prefill prefill and --decode decode servers")
}

func flagUsages(c *cobra.Command) string {
	return c.LocalFlags().FlagUsages() + c.InheritedFlags().FlagUsages()
}

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// The settings print and --help lists them in the order the structs declare them
// (server.Config: listener, the embedded router.Config, the server's). The golden files pin
// both, so a new setting, a renamed flag or a moved field shows in review; rewrite them with
// go test ./cmd/router -run TestServeGolden -update.
func TestServeGolden(t *testing.T) {
	t.Setenv(apiKeyEnv, "")
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"serve-print-config.golden", []string{"serve", "--print-config"}},
		{"serve-help.golden", []string{"serve", "--help"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			out, err := run(t, tc.args...)
			require.NoError(t, err)
			path := filepath.Join("testdata", tc.golden)
			if *update {
				require.NoError(t, os.MkdirAll("testdata", 0o755))
				require.NoError(t, os.WriteFile(path, []byte(out), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run with -update to create it")
			assert.Equal(t, string(want), out, "router %s drifted from %s (rewrite with -update if intended)", strings.Join(tc.args, " "), path)
		})
	}
}

// An unknown flag's error names the command it was given to and that command's --help, for
// every command (serve parses its own flags and says the same).
func TestFlagErrorsNameTheCommand(t *testing.T) {
	for _, cmd := range [][]string{{"sim"}, {"sim", "sweep"}, {"bench"}, {"fakeworker"}, {"demo"}, {"report"}, {"serve"}} {
		var stdout, stderr bytes.Buffer
		args := append(append([]string(nil), cmd...), "--bogus")
		require.Equal(t, 1, execute(args, &stdout, &stderr), cmd)
		name := strings.Join(cmd, " ")
		assert.Equal(t, "router: "+name+": unknown flag: --bogus (see router "+name+" --help)\n", stderr.String())
	}
	var stdout, stderr bytes.Buffer
	require.Equal(t, 1, execute([]string{"--bogus"}, &stdout, &stderr))
	assert.Equal(t, "router: unknown flag: --bogus (see router --help)\n", stderr.String())
}
