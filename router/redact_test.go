package router

import (
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedactURLForms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"user and password", "http://user:s3cret@10.0.0.1:8000", "http://***@10.0.0.1:8000"},
		{"user name alone", "http://alice@host:8000/v1", "http://***@host:8000/v1"},
		{"target name keeps its rank", "http://user:pw@host:1@3", "http://***@host:1@3"},
		{"plain target name", "http://host:8000@3", "http://host:8000@3"},
		{"no credentials", "https://host", "https://host"},
		{"@ in the password", "http://u:p@ss@host", "http://***@host"},
		{"already redacted", "http://***@host", "http://***@host"},
		{"@ in the path only", "http://host/a@b", "http://host/a@b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, RedactURL(tc.in))
		})
	}
}

func TestRedactText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"Go's stripped form keeps the user name", `Post "http://alice:***@127.0.0.1:9/generate": dial tcp: refused`,
			`Post "http://***@127.0.0.1:9/generate": dial tcp: refused`},
		{"two URLs", "a http://u:p@h1 and https://v:q@h2/x", "a http://***@h1 and https://***@h2/x"},
		{"target names are not user info", "target=http://h:1@0 other=http://u:p@h:1@2", "target=http://h:1@0 other=http://***@h:1@2"},
		{"sub-delimiters in the password", "http://u:p,a;s(s)@h/x", "http://***@h/x"},
		{"no URL", "user@example.com wrote", "user@example.com wrote"},
		{"ends at whitespace", "see http://h and mail a@b", "see http://h and mail a@b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, RedactText(tc.in))
		})
	}
}

// A real transport error from net/http quotes the URL with the password stripped but the user
// name kept; RedactIn drops both.
func TestRedactInTransportError(t *testing.T) {
	t.Parallel()
	worker := "http://alice:s3cret@127.0.0.1:1"
	_, err := http.Get(worker + "/health")
	require.Error(t, err)
	var ue *url.Error
	require.True(t, errors.As(err, &ue))
	require.Contains(t, err.Error(), "alice", "net/http keeps the user name (the case this guards)")
	got := RedactIn(err.Error(), worker)
	assert.NotContains(t, got, "alice")
	assert.NotContains(t, got, "s3cret")
	assert.Contains(t, got, "http://***@127.0.0.1:1/health")
	// The user info alone, as a dialler may quote it.
	assert.Equal(t, "lookup ***@host", RedactIn("lookup alice:s3cret@host", "http://alice:s3cret@host"))
}

func TestWorkerErrorsRedacted(t *testing.T) {
	t.Parallel()
	assert.NotContains(t, CheckWorkerURL("http://alice:s3cret@h?x=1").Error(), "alice")
	assert.NotContains(t, CheckWorkerURL("alice:s3cret@h:1").Error(), "alice")
	assert.NotContains(t, CheckWorkerURL("http://alice:s3cret@h:bad").Error(), "s3cret")
	assert.NotContains(t, CheckWorkerURL("ftp://alice:s3cret@h").Error(), "alice")
}
