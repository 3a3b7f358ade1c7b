package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runUntil runs the router command with args until its stdout contains marker, then hands the
// output to check and cancels the command, which must then return nil.
func runUntil(t *testing.T, args []string, marker string, check func(out string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), marker) {
		select {
		case err := <-done:
			t.Fatalf("command ended early: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "no %q in output: %s", marker, out.String())
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	check(out.String())
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("command did not stop on cancel")
	}
}

func TestFakeworkerClusterCommand(t *testing.T) {
	args := []string{"fakeworker", "cluster", "--prefill", "2", "--decode", "2", "--dp-size", "4", "--base-port", "0", "--profile", "instant", "--log-level", "warn"}
	runUntil(t, args, "router serve", func(out string) {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 5, out)
		var urls []string
		for i, line := range lines[:4] {
			f := strings.Fields(line)
			require.Len(t, f, 4, line)
			role := []string{"prefill", "prefill", "decode", "decode"}[i]
			assert.Equal(t, role, f[0])
			if role == "prefill" {
				assert.NotEqual(t, "bootstrap_port=-", f[2], "prefill workers print their bootstrap port")
			}
			assert.Equal(t, "dp_size=4", f[3])
			urls = append(urls, f[1])
			resp, err := http.Get(f[1] + "/health")
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode, f[1])
		}
		serve := lines[4]
		assert.True(t, strings.HasPrefix(serve, "router serve --pd-disaggregation "), serve)
		assert.Contains(t, serve, "--dp-aware")
		for i, u := range urls {
			if i < 2 {
				bp := strings.TrimPrefix(strings.Fields(lines[i])[2], "bootstrap_port=")
				assert.Contains(t, serve, "--prefill "+u+" "+bp)
			} else {
				assert.Contains(t, serve, "--decode "+u)
			}
		}
	})
}

func TestFakeworkerSingleCommand(t *testing.T) {
	args := []string{"fakeworker", "--mode", "prefill", "--port", "0", "--bootstrap-port", "0", "--profile", "constant", "--ttft", "1ms", "--itl", "1ms", "--log-level", "warn"}
	runUntil(t, args, "\n", func(out string) {
		f := strings.Fields(out)
		require.Len(t, f, 4, out)
		assert.Equal(t, "prefill", f[0])
		resp, err := http.Get(f[1] + "/get_server_info")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	})
}

func TestFakeworkerProfilesCommand(t *testing.T) {
	var out bytes.Buffer
	root := newRootCmd()
	root.SetArgs([]string{"fakeworker", "profiles"})
	root.SetOut(&out)
	require.NoError(t, root.Execute())
	for _, name := range []string{"constant", "instant", "llama3-8b-h100"} {
		assert.Contains(t, out.String(), name)
	}
	// Each modelled preset's validation against published SGLang runs follows the table.
	assert.Regexp(t, `(?m)^llama3-8b-a100 +llama31-8b-a100-sharegpt-v030: worst error \d+ % \(`, out.String())
	assert.Regexp(t, `(?m)^llama3-8b-h200 +unvalidated roofline$`, out.String())
	assert.NotRegexp(t, `(?m)^constant +unvalidated`, out.String(), "a constant profile models no engine")
}

func TestFakeworkerCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad mode", []string{"fakeworker", "--mode", "unified2", "--port", "0"}, "--mode"},
		{"bad profile", []string{"fakeworker", "--profile", "nope", "--port", "0"}, "--profile"},
		{"ttft without constant", []string{"fakeworker", "--profile", "instant", "--ttft", "1s", "--port", "0"}, "--ttft"},
		{"cluster without workers", []string{"fakeworker", "cluster", "--base-port", "0"}, "no workers"},
		{"cluster prefill without decode", []string{"fakeworker", "cluster", "--prefill", "1", "--base-port", "0"}, "needs both"},
		{"bad error rate", []string{"fakeworker", "--error-rate", "2", "--port", "0"}, "--error-rate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newRootCmd()
			root.SetArgs(tc.args)
			root.SetOut(&bytes.Buffer{})
			root.SetErr(&bytes.Buffer{})
			err := root.Execute()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
