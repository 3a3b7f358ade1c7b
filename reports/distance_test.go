package reports

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestKSDistance(t *testing.T) {
	assert.InDelta(t, 0, KSDistance([]float64{3, 1, 2}, []float64{1, 2, 3}), 1e-12)
	assert.InDelta(t, 1, KSDistance([]float64{1, 2}, []float64{5, 6}), 1e-12)
	assert.InDelta(t, 0.5, KSDistance([]float64{1, 2, 3, 4}, []float64{3, 4, 5, 6}), 1e-12)
	assert.Equal(t, 1.0, KSDistance(nil, []float64{1}))
}
