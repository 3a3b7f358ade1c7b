package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// run executes the command line and returns its stdout (stderr: runWithStderr).
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, _, err := runWithStderr(t, args...)
	return out, err
}

func runWithStderr(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := run(t, args...)
		require.NoError(t, err)
		assert.Regexp(t, `^router \S+ \(go1\.\d+[^\n]*\)\n$`, out, args)
	}
}

// execute is main without os.Exit: the exit status and one "router: " before the message,
// never two, even for errors of the router package that carry their own.
func TestExecuteExitStatusAndPrefix(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, 0, execute([]string{"version"}, &out, &errOut))
	assert.Empty(t, errOut.String())
	assert.Equal(t, 1, execute([]string{"serve", "--cache-threshold", "1.7", "--print-config"}, &out, &errOut))
	assert.Regexp(t, `^router: --cache-threshold 1.7 is outside \[0,1\]\n$`, errOut.String())
}

func TestHelpListsCommands(t *testing.T) {
	out, err := run(t, "--help")
	require.NoError(t, err)
	assert.Contains(t, out, "version")
	assert.Contains(t, out, "prefill and decode")
}

func TestUnknownCommandFails(t *testing.T) {
	_, err := run(t, "no-such-command")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no-such-command")
}
