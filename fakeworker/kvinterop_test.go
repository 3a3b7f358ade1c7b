package fakeworker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/internal/testutil"
)

// kvSubscriberPy subscribes as an SGLang consumer would (pyzmq SUB + msgpack), prints
// "ready", then one JSON line with the n messages it decoded and, given a replay port, what a
// DEALER replay from seq 0 returned.
const kvSubscriberPy = `
import json, sys, zmq, msgpack
port, topic, n, replay = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ctx = zmq.Context()
s = ctx.socket(zmq.SUB)
s.setsockopt(zmq.RCVTIMEO, 20000)
s.setsockopt(zmq.LINGER, 0)
s.connect("tcp://127.0.0.1:%d" % port)
s.setsockopt(zmq.SUBSCRIBE, topic.encode())
print("ready", flush=True)
msgs = []
for _ in range(n):
    t, seq, payload = s.recv_multipart()
    ts, events, rank = msgpack.unpackb(payload, raw=False)
    msgs.append({"topic": t.decode(), "seq": int.from_bytes(seq, "big", signed=True), "ts": ts, "events": events, "rank": rank})
out = {"messages": msgs}
if replay:
    d = ctx.socket(zmq.DEALER)
    d.setsockopt(zmq.IDENTITY, b"py-replayer")
    d.setsockopt(zmq.RCVTIMEO, 20000)
    d.setsockopt(zmq.LINGER, 0)
    d.connect("tcp://127.0.0.1:%d" % replay)
    d.send_multipart([b"", (0).to_bytes(8, "big")])
    seqs = []
    while True:
        empty, seq, payload = d.recv_multipart()
        seq = int.from_bytes(seq, "big", signed=True)
        if seq == -1:
            out["replay_end_payload"] = payload.decode()
            break
        seqs.append(seq)
        msgpack.unpackb(payload, raw=False)
    out["replay"] = seqs
print(json.dumps(out), flush=True)
`

// expectedStored is the JSON of the events a request with input_ids [10,20,…,90] at page 2
// publishes first: AllBlocksCleared, then four parent-chained BlockStored.
func expectedStored(shape string) string {
	var b strings.Builder
	b.WriteString("[")
	if shape == KVShapeMap {
		b.WriteString(`{"type":"AllBlocksCleared"}`)
	} else {
		b.WriteString(`["AllBlocksCleared"]`)
	}
	parent := "null"
	for i, h := range golden10to80 {
		if shape == KVShapeMap {
			fmt.Fprintf(&b, `,{"block_hashes":[%d],"block_size":2,"lora_id":null,"medium":"GPU","parent_block_hash":%s,"token_ids":[%d,%d],"type":"BlockStored"}`,
				h, parent, 10+20*i, 20+20*i)
		} else {
			fmt.Fprintf(&b, `,["BlockStored",[%d],%s,[%d,%d],2,null,"GPU"]`, h, parent, 10+20*i, 20+20*i)
		}
		parent = fmt.Sprint(h)
	}
	b.WriteString("]")
	return b.String()
}

// canonical re-encodes JSON with numbers kept exact (int64 hashes do not survive float64).
func canonical(t *testing.T, raw []byte) string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v), "%s", raw)
	out, err := json.Marshal(v)
	require.NoError(t, err)
	return string(out)
}

// Python's pyzmq + msgpack, decoding as an SGLang consumer does, sees exactly SGLang's frames
// and events from fakeworker, in both shapes, and its replay request gets the buffered batch
// and the end marker.
func TestKVEventsPythonInterop(t *testing.T) {
	python := testutil.Python(t, "kvevents-python", "zmq", "msgpack")
	script := filepath.Join(t.TempDir(), "sub.py")
	require.NoError(t, os.WriteFile(script, []byte(kvSubscriberPy), 0o600))
	for _, shape := range []string{KVShapeArray, KVShapeMap} {
		t.Run("shape="+shape, func(t *testing.T) {
			w := kvWorker(t, Config{PageSize: 2, KVEventsShape: shape},
				`{"publisher":"zmq","endpoint":"tcp://127.0.0.1:0","replay_endpoint":"tcp://127.0.0.1:0","topic":"kv@fake"}`)
			pub, replay := w.kvEventPorts()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, python, script, fmt.Sprint(pub[0]), "kv@fake", "1", fmt.Sprint(replay[0]))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			// stderr is read only after Wait (the copying goroutine writes it until then).
			fail := func(what string) {
				cancel()
				cmd.Wait()
				t.Fatalf("%s; python stderr: %s", what, stderr.String())
			}
			lines := bufio.NewScanner(stdout)
			lines.Buffer(make([]byte, 1<<20), 1<<20)
			if !lines.Scan() || lines.Text() != "ready" {
				fail("python did not get ready")
			}
			waitSubscribed(t, w, 0, 1)
			generate(t, w, `{"input_ids":[10,20,30,40,50,60,70,80,90],"sampling_params":{"max_new_tokens":1}}`)
			if !lines.Scan() {
				fail("python printed nothing")
			}
			raw := append([]byte(nil), lines.Bytes()...)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("python: %v: %s", err, stderr.String())
			}

			var got struct {
				Messages []struct {
					Topic  string          `json:"topic"`
					Seq    int64           `json:"seq"`
					TS     float64         `json:"ts"`
					Events json.RawMessage `json:"events"`
					Rank   int             `json:"rank"`
				} `json:"messages"`
				Replay           []int64 `json:"replay"`
				ReplayEndPayload *string `json:"replay_end_payload"`
			}
			require.NoError(t, json.Unmarshal(raw, &got), "%s", raw)
			require.Len(t, got.Messages, 1)
			m := got.Messages[0]
			assert.Equal(t, "kv@fake", m.Topic)
			assert.EqualValues(t, 0, m.Seq)
			assert.Equal(t, 0, m.Rank)
			assert.InDelta(t, float64(time.Now().Unix()), m.TS, 120)
			assert.Equal(t, expectedStored(shape), canonical(t, m.Events))
			assert.Equal(t, []int64{0}, got.Replay)
			require.NotNil(t, got.ReplayEndPayload, "the -1 end marker")
			assert.Empty(t, *got.ReplayEndPayload)
		})
	}
}
