package fakeworker

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router/wire"
)

// Without --tokenizer-path a worker counts tokens with the approximate workloads tokenizer
// (and generate's input_ids pass through), as before.
func TestWorkerWithoutTokenizer(t *testing.T) {
	t.Parallel()
	w := startWorker(t, Config{})
	assert.Nil(t, w.tok)
	ids, err := w.promptIDs(wire.Generate, []byte(`{"input_ids":[3,4]}`))
	require.NoError(t, err)
	assert.Equal(t, []uint32{3, 4}, ids)
}
