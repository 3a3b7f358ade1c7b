package fakeworker

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/pdrouter/pdrouter/sim/engine"
)

// SGLang's block-hash golden vectors (mem_cache/utils.py chain; issue 27).
var (
	golden1234   = int64(-3488128144981237669)                                                                // tokens [1,2,3,4], page 4
	golden10to80 = []int64{978178666101069530, -895308556211281782, -8033692805846017938, 835415944263129316} // tokens [10,20,…,80], page 2
)

// kvMsg is one received message: [topic, seq, payload] with the payload decoded generically.
type kvMsg struct {
	topic string
	seq   int64
	ts    float64
	evs   []any
	rank  any
}

func decodeKVMsg(t testing.TB, frames [][]byte) kvMsg {
	t.Helper()
	require.Len(t, frames, 3, "a KV event message is [topic, seq, payload]")
	require.Len(t, frames[1], 8, "seq is 8 bytes")
	var batch []any
	require.NoError(t, msgpack.Unmarshal(frames[2], &batch))
	require.Len(t, batch, 3, "payload is [ts, events, attn_dp_rank]")
	ts, ok := batch[0].(float64)
	require.True(t, ok, "ts is a float64: %T", batch[0])
	evs, ok := batch[1].([]any)
	require.True(t, ok, "events is an array: %T", batch[1])
	return kvMsg{topic: string(frames[0]), seq: int64(binary.BigEndian.Uint64(frames[1])), ts: ts, evs: evs, rank: batch[2]}
}

// num normalizes a msgpack-decoded integer.
func num(t testing.TB, v any) int64 {
	t.Helper()
	switch x := v.(type) {
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int64:
		return x
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		return int64(x)
	}
	t.Fatalf("not an integer: %T %v", v, v)
	return 0
}

// storedEv is a decoded BlockStored (either shape).
type storedEv struct {
	hash      int64
	parent    *int64
	tokens    []int64
	blockSize int64
	medium    string
}

// eventOf returns an event's type and its BlockStored fields (hash only for BlockRemoved),
// checking the shape's layout.
func eventOf(t testing.TB, shape string, v any) (string, storedEv) {
	t.Helper()
	var typ string
	var ev storedEv
	get := func(i int, key string) any { return nil }
	switch shape {
	case KVShapeArray:
		a, ok := v.([]any)
		require.True(t, ok, "array shape: %T", v)
		typ = a[0].(string)
		want := map[string]int{"BlockStored": 7, "BlockRemoved": 3, "AllBlocksCleared": 1}[typ]
		require.Len(t, a, want, "%s has %d elements in SGLang's array shape", typ, want)
		get = func(i int, _ string) any { return a[i] }
	case KVShapeMap:
		m, ok := v.(map[string]any)
		require.True(t, ok, "map shape: %T", v)
		typ = m["type"].(string)
		keys := map[string][]string{
			"BlockStored":      {"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium"},
			"BlockRemoved":     {"type", "block_hashes", "medium"},
			"AllBlocksCleared": {"type"},
		}[typ]
		var got []string
		for k := range m {
			got = append(got, k)
		}
		assert.ElementsMatch(t, keys, got)
		get = func(_ int, k string) any { return m[k] }
	}
	switch typ {
	case "BlockStored":
		hs := get(1, "block_hashes").([]any)
		require.Len(t, hs, 1, "one block per event, as SGLang's radix cache records them")
		ev.hash = num(t, hs[0])
		if p := get(2, "parent_block_hash"); p != nil {
			x := num(t, p)
			ev.parent = &x
		}
		for _, tok := range get(3, "token_ids").([]any) {
			ev.tokens = append(ev.tokens, num(t, tok))
		}
		ev.blockSize = num(t, get(4, "block_size"))
		assert.Nil(t, get(5, "lora_id"))
		ev.medium = get(6, "medium").(string)
	case "BlockRemoved":
		hs := get(1, "block_hashes").([]any)
		require.Len(t, hs, 1)
		ev.hash = num(t, hs[0])
		ev.medium = get(2, "medium").(string)
	}
	return typ, ev
}

// kvSub is a SUB socket on a rank's PUB endpoint.
func kvSub(t *testing.T, w *Worker, rank int, topic string) zmq4.Socket {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sub := zmq4.NewSub(ctx)
	t.Cleanup(func() { sub.Close(); cancel() })
	ports, _ := w.kvEventPorts()
	require.Greater(t, len(ports), rank)
	require.NoError(t, sub.Dial(fmt.Sprintf("tcp://127.0.0.1:%d", ports[rank])))
	require.NoError(t, sub.SetOption(zmq4.OptionSubscribe, topic))
	waitSubscribed(t, w, rank, 1)
	return sub
}

// waitSubscribed waits until rank's PUB socket has n subscriptions: nothing else tells a
// subscriber that its subscription reached the publisher (ZeroMQ drops what is published
// before), so it polls, with a deadline.
func waitSubscribed(t *testing.T, w *Worker, rank, n int) {
	t.Helper()
	pub := w.kv.ranks[rank].pub.(zmq4.Topics)
	deadline := time.Now().Add(10 * time.Second)
	for len(pub.Topics()) < n {
		require.True(t, time.Now().Before(deadline), "the subscription never reached rank %d's publisher", rank)
		time.Sleep(2 * time.Millisecond)
	}
}

// recvKV receives one message (the test's deadline bounds it).
func recvKV(t *testing.T, s zmq4.Socket) kvMsg {
	t.Helper()
	type res struct {
		msg zmq4.Msg
		err error
	}
	ch := make(chan res, 1)
	go func() { m, err := s.Recv(); ch <- res{m, err} }()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		return decodeKVMsg(t, r.msg.Frames)
	case <-time.After(20 * time.Second):
		t.Fatal("no KV event message within 20s")
	}
	return kvMsg{}
}

func kvWorker(t *testing.T, cfg Config, kv string) *Worker {
	t.Helper()
	cfg.KVEventsConfig = kv
	w := startWorker(t, cfg)
	require.NotNil(t, w.kv)
	return w
}

func generate(t *testing.T, w *Worker, body string) {
	t.Helper()
	status, raw := post(t, w.URL()+"/generate", body)
	require.Equal(t, http.StatusOK, status, string(raw))
}

// A request's pages are published as BlockStored with SGLang's hashes, parent-chained, in
// both shapes; the first batch starts with the AllBlocksCleared a new radix cache records.
func TestKVEventsPublishStoredBlocks(t *testing.T) {
	for _, shape := range []string{KVShapeArray, KVShapeMap} {
		t.Run("shape="+shape, func(t *testing.T) {
			t.Parallel()
			w := kvWorker(t, Config{PageSize: 2, KVEventsShape: shape}, `{"publisher":"zmq","endpoint":"tcp://127.0.0.1:0","topic":"kv"}`)
			sub := kvSub(t, w, 0, "kv")
			before := float64(time.Now().UnixNano()) / 1e9
			generate(t, w, `{"input_ids":[10,20,30,40,50,60,70,80,90],"sampling_params":{"max_new_tokens":1}}`)
			m := recvKV(t, sub)
			assert.Equal(t, "kv", m.topic)
			assert.EqualValues(t, 0, m.seq, "sequence numbers start at 0")
			assert.EqualValues(t, 0, num(t, m.rank))
			assert.GreaterOrEqual(t, m.ts, before-1)
			require.Len(t, m.evs, 5, "AllBlocksCleared, then one BlockStored per whole page (9 tokens: 4 pages)")
			typ, _ := eventOf(t, shape, m.evs[0])
			assert.Equal(t, "AllBlocksCleared", typ)
			var parent *int64
			for i, want := range golden10to80 {
				typ, ev := eventOf(t, shape, m.evs[i+1])
				require.Equal(t, "BlockStored", typ)
				assert.Equal(t, want, ev.hash, "page %d", i)
				assert.Equal(t, parent, ev.parent, "page %d's parent", i)
				assert.Equal(t, []int64{int64(10 + 20*i), int64(20 + 20*i)}, ev.tokens)
				assert.EqualValues(t, 2, ev.blockSize)
				assert.Equal(t, "GPU", ev.medium)
				parent = &ev.hash
			}

			// A second request extends the first page only: one store, its parent the
			// first page's hash; the sequence number moves on.
			generate(t, w, `{"input_ids":[10,20,7,7,1],"sampling_params":{"max_new_tokens":1}}`)
			m = recvKV(t, sub)
			assert.EqualValues(t, 1, m.seq)
			require.Len(t, m.evs, 1)
			_, ev := eventOf(t, shape, m.evs[0])
			require.NotNil(t, ev.parent)
			assert.Equal(t, golden10to80[0], *ev.parent)
			assert.Equal(t, []int64{7, 7}, ev.tokens)
		})
	}
}

// The single-page golden vector at page 4, and removals when the pool evicts.
func TestKVEventsPublishRemovals(t *testing.T) {
	t.Parallel()
	w := kvWorker(t, Config{PageSize: 4, MaxTotalTokens: 11}, `{"publisher":"zmq","endpoint":"tcp://127.0.0.1:0"}`)
	sub := kvSub(t, w, 0, "")
	generate(t, w, `{"input_ids":[1,2,3,4,5],"sampling_params":{"max_new_tokens":1}}`)
	m := recvKV(t, sub)
	require.Len(t, m.evs, 2)
	_, ev := eventOf(t, KVShapeArray, m.evs[1])
	assert.Equal(t, golden1234, ev.hash)
	assert.Nil(t, ev.parent)
	// 11 tokens of KV: a disjoint 9-token prompt (8 cached) evicts [1,2,3,4].
	generate(t, w, `{"input_ids":[9,9,9,9,8,8,8,8,7],"sampling_params":{"max_new_tokens":1}}`)
	m = recvKV(t, sub)
	var types []string
	for _, e := range m.evs {
		typ, ev := eventOf(t, KVShapeArray, e)
		types = append(types, typ)
		if typ == "BlockRemoved" {
			assert.Equal(t, golden1234, ev.hash)
			assert.Equal(t, "GPU", ev.medium)
		}
	}
	assert.Equal(t, []string{"BlockStored", "BlockStored", "BlockRemoved"}, types)
}

// The replay socket answers [id, "", start_seq] with the buffered batches from start_seq on,
// then the -1 end marker.
func TestKVEventsReplay(t *testing.T) {
	t.Parallel()
	w := kvWorker(t, Config{PageSize: 2}, `{"publisher":"zmq","endpoint":"tcp://127.0.0.1:0","replay_endpoint":"tcp://127.0.0.1:0","buffer_steps":2}`)
	for i := range 3 {
		generate(t, w, fmt.Sprintf(`{"input_ids":[%d,1,2],"sampling_params":{"max_new_tokens":1}}`, 100+i))
	}
	deadline := time.Now().Add(10 * time.Second)
	for w.kv.published.Load() < 3 { // nothing subscribes: only the counter tells they are out
		require.True(t, time.Now().Before(deadline), "3 batches were not published")
		time.Sleep(2 * time.Millisecond)
	}
	_, replay := w.kvEventPorts()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dealer := zmq4.NewDealer(ctx, zmq4.WithID(zmq4.SocketIdentity("replayer")))
	defer dealer.Close()
	require.NoError(t, dealer.Dial(fmt.Sprintf("tcp://127.0.0.1:%d", replay[0])))
	ask := func(start uint64) (seqs []int64, firsts []int64) {
		var sb [8]byte
		binary.BigEndian.PutUint64(sb[:], start)
		require.NoError(t, dealer.SendMulti(zmq4.NewMsgFrom(nil, sb[:])))
		for range 10 {
			msg, err := dealer.Recv()
			require.NoError(t, err)
			require.Len(t, msg.Frames, 3, "[\"\", seq, payload]")
			require.Empty(t, msg.Frames[0])
			if bytes.Equal(msg.Frames[1], kvEndSeq) {
				assert.Empty(t, msg.Frames[2], "the end marker's payload is empty")
				return seqs, firsts
			}
			m := decodeKVMsg(t, slices.Concat([][]byte{nil}, msg.Frames[1:]))
			seqs = append(seqs, m.seq)
			_, ev := eventOf(t, KVShapeArray, m.evs[len(m.evs)-1])
			firsts = append(firsts, ev.tokens[0])
		}
		t.Fatal("no end marker")
		return nil, nil
	}
	seqs, firsts := ask(0)
	assert.Equal(t, []int64{1, 2}, seqs, "buffer_steps 2 keeps the last two batches")
	assert.Equal(t, []int64{101, 102}, firsts)
	seqs, _ = ask(2)
	assert.Equal(t, []int64{2}, seqs)
	seqs, _ = ask(7)
	assert.Empty(t, seqs, "nothing from a future seq: only the end marker")
}

// dp-size 2: two PUB endpoints at base and base+1, each publishing its own rank's cache, and
// /server_info's kv_events block says where.
func TestKVEventsPerRankEndpoints(t *testing.T) {
	t.Parallel()
	w := kvWorker(t, Config{PageSize: 4, DPSize: 2}, `{"publisher":"zmq","endpoint":"tcp://127.0.0.1:0","replay_endpoint":"tcp://127.0.0.1:0","topic":"t"}`)
	pub, replay := w.kvEventPorts()
	require.Len(t, pub, 2)
	assert.Equal(t, pub[0]+1, pub[1], "rank r publishes on port base + r")
	assert.Equal(t, replay[0]+1, replay[1])
	_, raw := get(t, w.URL()+"/server_info")
	info := decodeJSON(t, raw)
	assert.Equal(t, map[string]any{"publisher": "zmq", "endpoint_host": "127.0.0.1", "endpoint_port_base": float64(pub[0]),
		"topic": "t", "block_size": float64(4), "dp_size": float64(2),
		"replay_endpoint_host": "127.0.0.1", "replay_endpoint_port_base": float64(replay[0])}, info["kv_events"])
	assert.NotNil(t, info["kv_events_config"])

	sub1 := kvSub(t, w, 1, "t")
	generate(t, w, `{"input_ids":[1,2,3,4,5],"data_parallel_rank":1,"sampling_params":{"max_new_tokens":1}}`)
	m := recvKV(t, sub1)
	assert.EqualValues(t, 1, num(t, m.rank), "attn_dp_rank")
	require.Len(t, m.evs, 2)
	_, ev := eventOf(t, KVShapeArray, m.evs[1])
	assert.Equal(t, golden1234, ev.hash)
}

// Without --kv-events-config: no publisher, kv_events null.
func TestKVEventsOff(t *testing.T) {
	t.Parallel()
	w := startWorker(t, Config{})
	assert.Nil(t, w.kv)
	_, raw := get(t, w.URL()+"/get_server_info")
	info := decodeJSON(t, raw)
	v, ok := info["kv_events"]
	assert.True(t, ok)
	assert.Nil(t, v)
	w2 := startWorker(t, Config{KVEventsConfig: `{"publisher":"null"}`})
	assert.Nil(t, w2.kv)
}

func TestParseKVEventsConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseKVEventsConfig(`{"publisher":"zmq","enable_kv_cache_events":true}`)
	require.NoError(t, err, "unknown fields are ignored, as pydantic does")
	assert.Equal(t, KVEventsConfig{Publisher: "zmq", Endpoint: "tcp://*:5557", BufferSteps: 10_000, HWM: 100_000, MaxQueueSize: 100_000}, c)
	for _, tc := range []struct{ raw, wantErr string }{
		{`{"publisher":"kafka"}`, "publisher"},
		{`{"publisher":"zmq","endpoint":"ipc:///tmp/x"}`, "endpoint"},
		{`{"publisher":"zmq","endpoint":"tcp://*:99999"}`, "endpoint"},
		{`{"publisher":"zmq","replay_endpoint":"tcp://*"}`, "replay_endpoint"},
		{`{"publisher":"zmq","buffer_steps":0}`, "buffer_steps"},
		{`{"publisher":"zmq","max_queue_size":0}`, "max_queue_size"},
		{`not json`, "--kv-events-config"},
	} {
		_, err := ParseKVEventsConfig(tc.raw)
		require.Error(t, err, tc.raw)
		assert.Contains(t, err.Error(), tc.wantErr)
		assert.Contains(t, err.Error(), "--kv-events-config")
	}
	assert.ErrorContains(t, Config{KVEventsShape: "yaml"}.Validate(), "--kv-events-shape")
	assert.ErrorContains(t, Config{ChatTemplate: "x.jinja"}.Validate(), "--tokenizer-path")

	s, err := shiftKVEventPorts(`{"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:0"}`, 4)
	require.NoError(t, err)
	c, err = ParseKVEventsConfig(s)
	require.NoError(t, err)
	assert.Equal(t, "tcp://*:5561", c.Endpoint)
	assert.Equal(t, "tcp://*:0", *c.ReplayEndpoint, "port 0 stays OS-picked")
}

// The queue between the engine loop and the socket drops (and counts) batches beyond
// max_queue_size instead of blocking the loop.
func TestKVEventsQueueDropsWhenFull(t *testing.T) {
	t.Parallel()
	p := &kvPublisher{cfg: KVEventsConfig{MaxQueueSize: 2}, ranks: []*kvRank{{wake: make(chan struct{}, 1)}}}
	p.ranks[0].p = p
	ev := []engine.KVEvent{{Kind: engine.KVCleared}}
	for range 5 {
		p.hook(time.Unix(1, 0), 0, ev)
	}
	assert.Len(t, p.ranks[0].queue, 2)
	assert.EqualValues(t, 3, p.dropped.Load())
	p.hook(time.Unix(1, 0), 7, ev) // a rank it does not have: ignored
	assert.EqualValues(t, 3, p.dropped.Load())
}

// With a host tier (--hicache-ratio) the worker publishes HiCache's tiered events over ZMQ: a
// page the GPU pool evicts is removed from "GPU" and stored on "CPU_PINNED" (same hash), and a
// request finding it there reports it as cached and stores it on the GPU again.
func TestKVEventsPublishHostTier(t *testing.T) {
	t.Parallel()
	w := kvWorker(t, Config{PageSize: 4, MaxTotalTokens: 11, Args: engine.ServerArgs{HiCacheRatio: 2}},
		`{"publisher":"zmq","endpoint":"tcp://127.0.0.1:0"}`)
	sub := kvSub(t, w, 0, "")
	type ev struct {
		typ, medium string
		hash        int64
	}
	events := func(m kvMsg) []ev {
		var out []ev
		for _, e := range m.evs {
			typ, x := eventOf(t, KVShapeArray, e)
			if typ != "AllBlocksCleared" {
				out = append(out, ev{typ, x.medium, x.hash})
			}
		}
		return out
	}
	generate(t, w, `{"input_ids":[1,2,3,4,5],"sampling_params":{"max_new_tokens":1}}`)
	assert.Equal(t, []ev{{"BlockStored", "GPU", golden1234}}, events(recvKV(t, sub)))

	// 11 tokens of KV: a disjoint 9-token prompt evicts [1,2,3,4] from the GPU to the host.
	generate(t, w, `{"input_ids":[9,9,9,9,8,8,8,8,7],"sampling_params":{"max_new_tokens":1}}`)
	var got []ev
	for len(got) < 4 {
		got = append(got, events(recvKV(t, sub))...)
	}
	rm := slices.Index(got, ev{"BlockRemoved", "GPU", golden1234})
	require.GreaterOrEqual(t, rm, 0, "the eviction takes the page off the GPU: %v", got)
	require.Less(t, rm+1, len(got))
	assert.Equal(t, ev{"BlockStored", "CPU_PINNED", golden1234}, got[rm+1], "and onto the host")
	got = slices.Delete(got, rm, rm+2)
	for _, e := range got {
		assert.Equal(t, ev{"BlockStored", "GPU", e.hash}, e, "the new prompt's pages, on the GPU")
	}

	// The first prompt again: its page is a host hit, loaded back (cached), on the GPU again.
	status, raw := post(t, w.URL()+"/generate", `{"input_ids":[1,2,3,4,5],"sampling_params":{"max_new_tokens":1}}`)
	require.Equal(t, http.StatusOK, status, string(raw))
	var resp struct {
		MetaInfo struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"meta_info"`
	}
	require.NoError(t, json.Unmarshal(raw, &resp))
	assert.Equal(t, 4, resp.MetaInfo.CachedTokens, "the host hit counts as cached")
	got = nil
	for !slices.Contains(got, ev{"BlockStored", "GPU", golden1234}) {
		got = append(got, events(recvKV(t, sub))...)
	}
	assert.NotContains(t, got, ev{"BlockRemoved", "CPU_PINNED", golden1234}, "the host keeps its copy")
}
