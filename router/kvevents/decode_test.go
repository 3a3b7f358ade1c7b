package kvevents

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/pdrouter/pdrouter/router/kvindex"
)

func pack(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	require.NoError(t, err)
	return b
}

func seqFrame(seq int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(seq))
}

// bigHash is a hash whose unsigned form exceeds MaxInt64 (a negative int64).
var bigHash = uint64(0xCF97C6E4F55A7E5B)

func TestDecodeShapes(t *testing.T) {
	t.Parallel()
	stored := kvindex.Event{Kind: kvindex.BlockStored, Hashes: []kvindex.Hash{1, kvindex.Hash(int64(bigHash))},
		Parent: -7, HasParent: true, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 2}
	tests := []struct {
		name    string
		events  []any
		rank    []any // appended after events: nothing, nil or a rank
		want    []kvindex.Event
		skipped int
		hasRank bool
	}{
		{
			name:   "array with 6 elements (older SGLang), hash as uint64, rank absent",
			events: []any{[]any{"BlockStored", []any{int64(1), bigHash}, int8(-7), []any{1, 2, 3, 4}, 2, nil}},
			want:   []kvindex.Event{stored},
		},
		{
			name:   "array with 7 elements (medium), no parent, nil rank",
			events: []any{[]any{"BlockStored", []any{int64(5)}, nil, []any{9, 9}, uint16(2), int32(3), "GPU"}},
			rank:   []any{nil},
			want: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []kvindex.Hash{5}, Tokens: []uint32{9, 9},
				BlockSize: 2, LoRAID: 3, Medium: "GPU"}},
		},
		{
			name: "array with 8 elements (medium, metadata {cache_salt}), rank 1",
			events: []any{[]any{"BlockStored", []any{int64(5)}, int64(4), []any{9, 9}, 2, nil, "GPU",
				map[string]any{"cache_salt": "tenant-a", "session_id": "s1"}}},
			rank:    []any{1},
			hasRank: true,
			want: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []kvindex.Hash{5}, Parent: 4, HasParent: true,
				Tokens: []uint32{9, 9}, BlockSize: 2, Medium: "GPU", CacheSalt: "tenant-a"}},
		},
		{
			name: "array BlockRemoved with and without medium, AllBlocksCleared",
			events: []any{[]any{"BlockRemoved", []any{int64(-1), uint8(200)}}, []any{"BlockRemoved", []any{int64(3)}, "CPU_TIER1"},
				[]any{"AllBlocksCleared"}},
			want: []kvindex.Event{{Kind: kvindex.BlockRemoved, Hashes: []kvindex.Hash{-1, 200}},
				{Kind: kvindex.BlockRemoved, Hashes: []kvindex.Hash{3}, Medium: "CPU_TIER1"}, {Kind: kvindex.AllBlocksCleared}},
		},
		{
			name: "map shape with unknown fields, type not first",
			events: []any{map[string]any{"block_hashes": []any{int64(1), bigHash}, "parent_block_hash": -7, "token_ids": []any{1, 2, 3, 4},
				"block_size": 2, "lora_id": nil, "type": "BlockStored", "session_id": "s", "future": map[string]any{"x": []any{1}}}},
			want: []kvindex.Event{stored},
		},
		{
			name: "map shape cache_salt as a field (#37482) and in metadata (#37271)",
			events: []any{
				map[string]any{"type": "BlockStored", "block_hashes": []any{1}, "parent_block_hash": nil, "token_ids": []any{1}, "block_size": 1, "cache_salt": "a"},
				map[string]any{"type": "BlockStored", "block_hashes": []any{2}, "token_ids": []any{2}, "block_size": 1, "metadata": map[string]any{"cache_salt": "b"}},
			},
			want: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []kvindex.Hash{1}, Tokens: []uint32{1}, BlockSize: 1, CacheSalt: "a"},
				{Kind: kvindex.BlockStored, Hashes: []kvindex.Hash{2}, Tokens: []uint32{2}, BlockSize: 1, CacheSalt: "b"}},
		},
		{
			name: "map BlockRemoved, AllBlocksCleared, unknown types skipped in both shapes",
			events: []any{map[string]any{"type": "BlockRemoved", "block_hashes": []any{8}, "medium": "GPU"},
				map[string]any{"type": "BlockTransferred", "x": 1}, []any{"LoadStat", 1, 2},
				map[string]any{"type": "AllBlocksCleared"}},
			want:    []kvindex.Event{{Kind: kvindex.BlockRemoved, Hashes: []kvindex.Hash{8}, Medium: "GPU"}, {Kind: kvindex.AllBlocksCleared}},
			skipped: 2,
		},
		{
			name:   "EAGLE bigram token ids: hashes kept, tokens dropped",
			events: []any{[]any{"BlockStored", []any{1}, nil, []any{[]any{1, 2}, []any{2, 3}}, 2, nil}},
			want:   []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []kvindex.Hash{1}, BlockSize: 2}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			batch := append([]any{1.5, tc.events}, tc.rank...)
			m, err := Decode([][]byte{[]byte("kv"), seqFrame(42), pack(t, batch)})
			require.NoError(t, err)
			assert.Equal(t, "kv", m.Topic)
			assert.Equal(t, int64(42), m.Batch.Seq)
			assert.Equal(t, 1.5, m.Batch.TS)
			assert.Equal(t, tc.want, m.Batch.Events)
			assert.Equal(t, tc.skipped, m.Skipped)
			assert.Equal(t, tc.hasRank, m.Batch.HasRank)
			if tc.hasRank {
				assert.Equal(t, 1, m.Batch.Rank)
			}
		})
	}
}

// TestDecodeIntWidths: every msgpack integer width decodes, and a ts may be an integer.
func TestDecodeIntWidths(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	require.NoError(t, e.EncodeArrayLen(3))
	require.NoError(t, e.EncodeUint32(7)) // ts as an int
	require.NoError(t, e.EncodeArrayLen(1))
	require.NoError(t, e.EncodeArrayLen(2))
	require.NoError(t, e.EncodeString("BlockRemoved"))
	require.NoError(t, e.EncodeArrayLen(8))
	require.NoError(t, e.EncodeInt8(-3))
	require.NoError(t, e.EncodeInt16(-300))
	require.NoError(t, e.EncodeInt32(-70000))
	require.NoError(t, e.EncodeInt64(math.MinInt64))
	require.NoError(t, e.EncodeUint8(250))
	require.NoError(t, e.EncodeUint16(65000))
	require.NoError(t, e.EncodeUint32(4000000000))
	require.NoError(t, e.EncodeUint64(math.MaxUint64))
	require.NoError(t, e.EncodeUint8(0)) // rank as uint8
	b, _, err := DecodePayload(buf.Bytes())
	require.NoError(t, err)
	assert.Equal(t, 7.0, b.TS)
	assert.True(t, b.HasRank)
	assert.Equal(t, []kvindex.Hash{-3, -300, -70000, math.MinInt64, 250, 65000, 4000000000, -1}, b.Events[0].Hashes)
}

func TestDecodeReplayFrames(t *testing.T) {
	t.Parallel()
	end, err := DecodeReplay([][]byte{{}, seqFrame(-1), {}})
	require.NoError(t, err)
	assert.True(t, end.End)
	assert.Equal(t, int64(EndSeq), end.Batch.Seq)

	payload := pack(t, []any{2.0, []any{[]any{"AllBlocksCleared"}}})
	m, err := DecodeReplay([][]byte{{}, seqFrame(5), payload})
	require.NoError(t, err)
	assert.False(t, m.End)
	assert.Equal(t, int64(5), m.Batch.Seq)
	assert.Equal(t, []kvindex.Event{{Kind: kvindex.AllBlocksCleared}}, m.Batch.Events)

	m, err = DecodeReplay([][]byte{{}, []byte("kv"), seqFrame(6), payload})
	require.NoError(t, err)
	assert.Equal(t, "kv", m.Topic)
	assert.Equal(t, int64(6), m.Batch.Seq)
}

// TestDecodeGarbage: malformed input is an error naming what is wrong, never a panic.
func TestDecodeGarbage(t *testing.T) {
	t.Parallel()
	ok := pack(t, []any{1.0, []any{}})
	truncated := pack(t, []any{1.0, []any{[]any{"BlockRemoved", []any{1, 2}}}})
	truncated = truncated[:len(truncated)-1]
	tests := []struct {
		name   string
		frames [][]byte
		want   string
	}{
		{"two frames", [][]byte{[]byte("kv"), seqFrame(1)}, "2 frames"},
		{"short seq", [][]byte{[]byte("kv"), {1, 2, 3}, ok}, "seq frame has 3 bytes"},
		{"negative seq", [][]byte{[]byte("kv"), seqFrame(-5), ok}, "seq -5"},
		{"payload not msgpack array", [][]byte{nil, seqFrame(1), pack(t, "hello")}, "batch is msgpack code"},
		{"empty payload", [][]byte{nil, seqFrame(1), nil}, "batch truncated"},
		{"batch too short", [][]byte{nil, seqFrame(1), pack(t, []any{1.0})}, "batch has 1 elements"},
		{"ts a string", [][]byte{nil, seqFrame(1), pack(t, []any{"x", []any{}})}, "batch ts"},
		{"events not a list", [][]byte{nil, seqFrame(1), pack(t, []any{1.0, 3})}, "batch events"},
		{"event a number", [][]byte{nil, seqFrame(1), pack(t, []any{1.0, []any{3}})}, "event 0: event is msgpack code"},
		{"empty event array", [][]byte{nil, seqFrame(1), pack(t, []any{1.0, []any{[]any{}}})}, "event array is empty"},
		{"tag not a string", [][]byte{nil, seqFrame(1), pack(t, []any{1.0, []any{[]any{5}}})}, "event tag"},
		{"hash a string", [][]byte{nil, seqFrame(1), pack(t, []any{1.0, []any{[]any{"BlockRemoved", []any{"h"}}}})}, "block_hashes[0]"},
		{"hash nil", [][]byte{nil, seqFrame(1), pack(t, []any{1.0, []any{[]any{"BlockRemoved", []any{nil}}}})}, "block_hashes[0] is nil"},
		{"stored without hashes", [][]byte{nil, seqFrame(1), pack(t, []any{1.0, []any{map[string]any{"type": "BlockStored"}}})}, "without block_hashes"},
		{"map without type", [][]byte{nil, seqFrame(1), pack(t, []any{1.0, []any{map[string]any{"block_hashes": []any{1}}}})}, `no "type"`},
		{"negative token", [][]byte{nil, seqFrame(1), pack(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}, 1, nil}}})}, "token_ids[0]"},
		{"zero block size", [][]byte{nil, seqFrame(1), pack(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{1}, 0, nil}}})}, "block_size 0"},
		{"rank a string", [][]byte{nil, seqFrame(1), pack(t, []any{1.0, []any{}, "r"})}, "attn_dp_rank"},
		{"truncated event", [][]byte{nil, seqFrame(1), truncated}, "block_hashes[1] truncated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Decode(tc.frames)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "kvevents: ")
		})
	}
}

// FuzzDecode: no input panics, and a decoded message re-decodes identically from its payload.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("kv"), seqFrame(0), pack(f, []any{1.0, []any{[]any{"BlockStored", []any{1, bigHash}, nil, []any{1, 2}, 1, nil, "GPU", map[string]any{"cache_salt": "s"}}}, 0}))
	f.Add([]byte(""), seqFrame(3), pack(f, []any{1.0, []any{map[string]any{"type": "BlockRemoved", "block_hashes": []any{-1}, "x": nil}, []any{"AllBlocksCleared"}}, nil}))
	f.Add([]byte("kv"), seqFrame(-1), []byte{})
	f.Add([]byte("kv"), []byte{1}, []byte{0x93})
	f.Add([]byte("kv"), seqFrame(1), []byte{0x92, 0xcb, 1, 2, 3, 4, 5, 6, 7, 8, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, topic, seq, payload []byte) {
		m, err := Decode([][]byte{topic, seq, payload})
		if err != nil || m.End {
			return
		}
		b, skipped, err := DecodePayload(payload)
		require.NoError(t, err)
		b.Seq = m.Batch.Seq
		assert.Equal(t, m.Batch, b)
		assert.Equal(t, m.Skipped, skipped)
	})
}
