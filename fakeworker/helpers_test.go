package fakeworker

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/stretchr/testify/require"
)

// startWorker starts a worker on loopback ports from the OS and stops it when the test ends.
func startWorker(t testing.TB, cfg Config) *Worker {
	t.Helper()
	w, err := Start(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		w.Stop()
		w.Wait()
	})
	return w
}

// testClient has no timeout of its own: tests bound requests with contexts.
var testClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// post sends body to url and returns the status and the whole response body.
func post(t testing.TB, url, body string) (int, []byte) {
	t.Helper()
	return postCtx(t, context.Background(), url, body)
}

func postCtx(t testing.TB, ctx context.Context, url, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(body))
	require.NoError(t, err)
	resp, err := testClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, raw
}

func get(t testing.TB, url string) (int, []byte) {
	t.Helper()
	resp, err := testClient.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, raw
}

// event is one SSE data event with the time it was read.
type event struct {
	data []byte
	at   time.Time
}

// readEvents reads an SSE body to its end, timestamping each event as it is parsed; err is the
// body's read error (nil at a clean EOF).
func readEvents(body io.Reader) ([]event, error) {
	var p wire.Parser
	var evs []event
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			now := time.Now()
			p.Feed(buf[:n])
			for {
				ev, ok := p.Next()
				if !ok {
					break
				}
				if ev.HasData() {
					evs = append(evs, event{data: append([]byte(nil), ev.Data...), at: now})
				}
			}
		}
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
	}
}

// stream posts body and reads the SSE response.
func stream(t testing.TB, url, body string) (*http.Response, []event, error) {
	t.Helper()
	resp, err := testClient.Post(url, "application/json", bytes.NewBufferString(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	evs, err := readEvents(resp.Body)
	return resp, evs, err
}

func decodeJSON(t testing.TB, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m), "body: %s", raw)
	return m
}

// loadOf fetches /get_load.
func loadOf(t testing.TB, w *Worker) []loadEntry {
	t.Helper()
	status, raw := get(t, w.URL()+"/get_load")
	require.Equal(t, http.StatusOK, status, string(raw))
	var out []loadEntry
	require.NoError(t, json.Unmarshal(raw, &out))
	return out
}

// pdBody adds bootstrap fields for prefill p to a JSON object body.
func pdBody(body string, p *Worker, room uint64, extra string) string {
	fields := `"bootstrap_host":"127.0.0.1","bootstrap_port":` + strconv.Itoa(p.BootstrapPort()) + `,"bootstrap_room":` + strconv.FormatUint(room, 10)
	if extra != "" {
		fields += "," + extra
	}
	return body[:len(body)-1] + "," + fields + "}"
}

// goroutinesSettle waits until the goroutine count drops to at most base.
func goroutinesSettle(t testing.TB, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("goroutines leaked: %d > %d\n%s", runtime.NumGoroutine(), base, buf[:n])
		}
		time.Sleep(5 * time.Millisecond)
	}
}
