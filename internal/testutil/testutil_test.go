package testutil

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// endRecorder is a testing.TB whose Skipf and Fatalf record how the test would have ended and
// stop the goroutine, as the real ones do.
type endRecorder struct {
	testing.TB
	ended, msg string
}

func (r *endRecorder) Helper() {}

func (r *endRecorder) Skipf(format string, args ...any) {
	r.ended, r.msg = "skip", fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *endRecorder) Fatalf(format string, args ...any) {
	r.ended, r.msg = "fail", fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder on a goroutine of its own (Skipf and Fatalf end it) and returns
// the recorder.
func run(t *testing.T, f func(tb testing.TB)) *endRecorder {
	r := &endRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestNeedTool(t *testing.T) {
	missing := errors.New("kustomize not found at /nonexistent")
	for _, tc := range []struct {
		name, env string
		err       error
		ended     string
	}{
		{"present", "1", nil, ""},                 // nothing missing: the test goes on, required or not
		{"fresh machine", "", missing, "skip"},    // a plain go test
		{"make test", "1", missing, "fail"},       // the Makefile's test targets
		{"any other value", "0", missing, "skip"}, // only "1" requires
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(RequireToolsEnv, tc.env)
			r := run(t, func(tb testing.TB) { NeedTool(tb, "kustomize", tc.err) })
			assert.Equal(t, tc.ended, r.ended)
			if tc.ended != "" {
				assert.Contains(t, r.msg, "kustomize not found at /nonexistent")
				assert.Contains(t, r.msg, "`make kustomize`")
			}
		})
	}
}

func TestPythonMissing(t *testing.T) {
	t.Setenv(RequireToolsEnv, "")
	t.Setenv("PDROUTER_PYTHON", "/nonexistent/python3")
	r := run(t, func(tb testing.TB) { Python(tb, "kvevents-python", "zmq", "msgpack") })
	require.Equal(t, "skip", r.ended)
	assert.Contains(t, r.msg, "/nonexistent/python3 cannot import zmq and msgpack")
	assert.Contains(t, r.msg, "`make kvevents-python`")
}

func TestTokenizerOracleOverride(t *testing.T) {
	t.Setenv("PDROUTER_TOKENIZER_ORACLE", "/elsewhere")
	assert.Equal(t, "/elsewhere", TokenizerOracle())
	t.Setenv("PDROUTER_TOKENIZER_ORACLE", "")
	assert.Contains(t, TokenizerOracle(), ".cache/pdrouter/tokenizer-oracle")
}

func TestEventually(t *testing.T) {
	t.Parallel()
	n := 0
	r := run(t, func(tb testing.TB) { Eventually(tb, time.Minute, func() bool { n++; return n == 3 }, "three polls") })
	assert.Empty(t, r.ended, "the condition came true")
	assert.Equal(t, 3, n, "no poll after it did")

	r = run(t, func(tb testing.TB) { Eventually(tb, 10*time.Millisecond, func() bool { return false }, "never") })
	require.Equal(t, "fail", r.ended)
	assert.Equal(t, "timed out after 10ms waiting for never", r.msg)
}
