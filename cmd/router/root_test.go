package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestVersion(t *testing.T) {
	out, err := run(t, "version")
	require.NoError(t, err)
	assert.Regexp(t, `^router \S+ \(go1\.\d+`, out)
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
