package kvevents

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router/kvindex"
)

// TestInteropPythonPublisher: a Python publisher built on pyzmq and msgpack, framing batches
// as SGLang's ZmqEventPublisher does, in both event shapes, with a batch recovered over its
// ROUTER replay socket: the index holds exactly the blocks it published.
func TestInteropPythonPublisher(t *testing.T) {
	cmd := exec.Command(testutil.Python(t, "kvevents-python", "zmq", "msgpack"), "testdata/publisher.py")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	defer func() {
		_ = stdin.Close() // the script exits when its stdin closes
		if err := cmd.Wait(); err != nil {
			t.Errorf("publisher.py: %v\n%s", err, stderr.String())
		}
	}()
	lines := bufio.NewScanner(stdout)
	addr := map[string]string{}
	for len(addr) < 2 && lines.Scan() {
		k, v, _ := strings.Cut(lines.Text(), " ")
		addr[k] = v
	}
	require.Len(t, addr, 2, "publisher.py printed no endpoints: %s", stderr.String())

	ix := newFakeIndex()
	s := newSubscriber(ix, fastOpts(nil))
	defer s.Close()
	require.NoError(t, s.Add(Endpoint{Target: target, Pub: addr["PUB"], Replay: addr["REPLAY"], Topic: "kv"}))
	require.Eventually(t, func() bool { return lastSeq(s, target) == 3 }, waitWithin, pollEvery, "seq 3")

	// 1,2,3 stored; -5 and 2^63+11 stored, 2 removed; (replayed) 40, 41 stored, 1 removed;
	// 50 stored, 3 removed.
	assert.Equal(t, []kvindex.Hash{-9223372036854775797, -5, 40, 41, 50}, ix.held(target))
	st := s.Status()[0]
	assert.False(t, st.Stale)
	assert.Equal(t, uint64(1), st.Gaps)
	assert.Equal(t, uint64(4), st.Batches)
	assert.Equal(t, 1.0, promtest.ToFloat64(s.m.unknown.WithLabelValues(redact(target))))
}
