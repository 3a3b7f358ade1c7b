package fakeworker

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// GET /fakeworker/slow_factor reports the slow factor (--slow-factor at start); POST sets it
// at runtime, which sets the engine's speed (model time ÷ slow factor); a body without a
// positive slow_factor is the client's error, naming the field.
func TestSlowFactorChangesAtRuntime(t *testing.T) {
	t.Parallel()
	w := startWorker(t, Config{Speedup: 4, Failures: Failures{SlowFactor: 1.5}})
	read := func(raw []byte) float64 {
		var v struct {
			SlowFactor float64 `json:"slow_factor"`
		}
		require.NoError(t, json.Unmarshal(raw, &v), string(raw))
		return v.SlowFactor
	}
	speedup := func() float64 {
		var s float64
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.True(t, w.loop.query(ctx, func(l *loop, _ time.Time) { s = l.srv.Config().Speedup }))
		return s
	}
	status, raw := get(t, w.URL()+"/fakeworker/slow_factor")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, 1.5, read(raw))
	assert.InDelta(t, 4/1.5, speedup(), 1e-12)

	status, raw = post(t, w.URL()+"/fakeworker/slow_factor", `{"slow_factor": 3}`)
	require.Equal(t, http.StatusOK, status, string(raw))
	assert.Equal(t, 3.0, read(raw))
	_, raw = get(t, w.URL()+"/fakeworker/slow_factor")
	assert.Equal(t, 3.0, read(raw))
	assert.InDelta(t, 4/3.0, speedup(), 1e-12)

	for _, body := range []string{`{}`, `{"slow_factor": 0}`, `{"slow_factor": -2}`, `{"slow_factor": "2"}`, `nope`} {
		status, raw = post(t, w.URL()+"/fakeworker/slow_factor", body)
		assert.Equal(t, http.StatusBadRequest, status, body)
		assert.Contains(t, string(raw), "slow_factor", body)
	}
	_, raw = get(t, w.URL()+"/fakeworker/slow_factor")
	assert.Equal(t, 3.0, read(raw), "a refused change changes nothing")
	assert.Error(t, w.SetSlowFactor(context.Background(), 0))
}
