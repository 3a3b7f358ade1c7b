package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestServerInfoProbeRetriesUntilReady(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/get_server_info", r.URL.Path)
		require.Equal(t, "Bearer k", r.Header.Get("Authorization"))
		if calls.Add(1) < 3 {
			http.Error(w, "loading", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"dp_size": 4, "disaggregation_mode": "prefill", "model_path": "m"}`))
	}))
	defer srv.Close()
	instant := make(chan time.Time)
	close(instant)
	never := make(chan time.Time)
	d := &serverInfoProbe{Client: srv.Client(), APIKey: "k", Timeout: time.Hour, Interval: time.Second,
		After: func(dur time.Duration) <-chan time.Time {
			if dur == time.Hour {
				return never
			}
			return instant
		}}
	n, err := d.dpSize(context.Background(), srv.URL)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.Equal(t, int32(3), calls.Load())
}

func TestServerInfoProbeErrors(t *testing.T) {
	t.Parallel()
	noDP := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"model_path": "m"}`))
	}))
	defer noDP.Close()
	notJSON := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`<html>`))
	}))
	defer notJSON.Close()
	instant := make(chan time.Time)
	close(instant)
	d := &serverInfoProbe{Client: http.DefaultClient, Timeout: time.Minute, Interval: time.Second,
		After: func(time.Duration) <-chan time.Time { return instant }}

	_, err := d.dpSize(context.Background(), noDP.URL)
	require.ErrorContains(t, err, "has no dp_size")
	_, err = d.dpSize(context.Background(), notJSON.URL)
	require.ErrorContains(t, err, "not JSON")

	// An unreachable worker fails once the startup timeout fires, naming the flag.
	down := httptest.NewServer(http.NotFoundHandler())
	url := down.URL
	down.Close()
	_, err = d.dpSize(context.Background(), url)
	require.ErrorContains(t, err, "--worker-startup-timeout-secs")
}

// dpSize is info returning only dp_size.
func (d *serverInfoProbe) dpSize(ctx context.Context, url string) (int, error) {
	info, err := d.info(ctx, url)
	if err != nil {
		return 0, err
	}
	return *info.DPSize, nil
}
