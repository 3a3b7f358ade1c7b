package wire

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// member of a decoded object, for order-aware comparisons without this package's own parser.
type kv struct {
	Key string
	Raw string
}

// topLevel decodes a JSON object with encoding/json into its members in order (raw values
// exactly as they appear).
func topLevel(t testing.TB, b []byte) []kv {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('{'), tok)
	var out []kv
	for dec.More() {
		tok, err := dec.Token()
		require.NoError(t, err)
		var raw json.RawMessage
		require.NoError(t, dec.Decode(&raw))
		out = append(out, kv{tok.(string), string(raw)})
	}
	return out
}

func asMap(t testing.TB, b []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	require.NoError(t, dec.Decode(&m), "%s", b)
	return m
}

func num(n int64) json.Number   { return json.Number(strconv.FormatInt(n, 10)) }
func unum(n uint64) json.Number { return json.Number(strconv.FormatUint(n, 10)) }
func ip(n int) *int             { return &n }

const testSeed = 42

func newGen() *IDGen { return NewIDGen(rand.New(rand.NewPCG(testSeed, 7)), "10.1.2.3") }

// unknownFields are appended to every body so each case shows they survive untouched.
const unknownFields = `"x_nested":{"a":[1,{"b":"ü\u00e9","c":null}],"d":{"e":true}},"big":12345678901234567890,` +
	`"huge":1.5e999,"uni":"日本語 😀 \ud83d\ude00","neg":-0.0`

func TestPDInjection(t *testing.T) {
	t.Parallel()
	chat := `{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":"hi"}],` + unknownFields + `,"stream":true}`
	tests := []struct {
		name       string
		route      Route
		body       string
		opt        PDOptions
		batch      int
		clientRIDs []string       // kept in place when set
		prefill    map[string]any // expected injected keys besides rid and bootstrap_room
		decode     map[string]any
		prefixes   string // rid prefix
	}{
		{
			// SPEC §1.4 wire example: non-DP, `--prefill http://10.0.0.1:30001 none`.
			name: "route=chat/dp=none/port=none", route: Chat, body: chat,
			opt:      PDOptions{Host: BootstrapHost("http://10.0.0.1:30001")},
			prefill:  map[string]any{"bootstrap_host": "10.0.0.1", "bootstrap_port": nil},
			decode:   map[string]any{"bootstrap_host": "10.0.0.1", "bootstrap_port": nil, "data_parallel_rank": nil, "data_parallel_rank_decode": nil},
			prefixes: "chatcmpl-",
		},
		{
			name: "route=chat/dp=both/style=legacy", route: Chat, body: chat,
			opt:      PDOptions{Host: "p0", Port: ip(8998), PrefillRank: ip(1), DecodeRank: ip(3)},
			prefill:  map[string]any{"bootstrap_host": "p0", "bootstrap_port": num(8998), "data_parallel_rank": num(1)},
			decode:   map[string]any{"bootstrap_host": "p0", "bootstrap_port": num(8998), "data_parallel_rank": num(1), "data_parallel_rank_decode": num(3)},
			prefixes: "chatcmpl-",
		},
		{
			// Only the decode target is DP: the prefill leg gets no rank, decode names both.
			name: "route=chat/dp=decode/style=legacy", route: Chat, body: chat,
			opt:      PDOptions{Host: "p0", Port: ip(1), DecodeRank: ip(0)},
			prefill:  map[string]any{"bootstrap_host": "p0", "bootstrap_port": num(1)},
			decode:   map[string]any{"bootstrap_host": "p0", "bootstrap_port": num(1), "data_parallel_rank": nil, "data_parallel_rank_decode": num(0)},
			prefixes: "chatcmpl-",
		},
		{
			name: "route=chat/dp=both/style=routed", route: Chat, body: chat,
			opt:      PDOptions{Host: "p0", Port: ip(8998), PrefillRank: ip(1), DecodeRank: ip(3), Style: Routed},
			prefill:  map[string]any{"bootstrap_host": "p0", "bootstrap_port": num(8998), "routed_dp_rank": num(1)},
			decode:   map[string]any{"bootstrap_host": "p0", "bootstrap_port": num(8998), "routed_dp_rank": num(3), "disagg_prefill_dp_rank": num(1)},
			prefixes: "chatcmpl-",
		},
		{
			// Routed without DP: like legacy, the prefill leg omits its rank, decode sends nulls.
			name: "route=chat/dp=none/style=routed", route: Chat, body: chat,
			opt:      PDOptions{Host: "p0", Style: Routed},
			prefill:  map[string]any{"bootstrap_host": "p0", "bootstrap_port": nil},
			decode:   map[string]any{"bootstrap_host": "p0", "bootstrap_port": nil, "routed_dp_rank": nil, "disagg_prefill_dp_rank": nil},
			prefixes: "chatcmpl-",
		},
		{
			name: "route=chat/host=ipv6", route: Chat, body: chat,
			opt:      PDOptions{Host: BootstrapHost("http://[fd00::0:1]:30001"), Port: ip(9000)},
			prefill:  map[string]any{"bootstrap_host": "[fd00::1]", "bootstrap_port": num(9000)},
			decode:   map[string]any{"bootstrap_host": "[fd00::1]", "bootstrap_port": num(9000), "data_parallel_rank": nil, "data_parallel_rank_decode": nil},
			prefixes: "chatcmpl-",
		},
		{
			name: "route=chat/rid=client", route: Chat,
			body:       `{"rid":"client-rid-1","messages":[{"role":"user","content":"hi"}],` + unknownFields + `}`,
			opt:        PDOptions{Host: "p0"},
			clientRIDs: []string{"client-rid-1"},
			prefill:    map[string]any{"bootstrap_host": "p0", "bootstrap_port": nil},
			decode:     map[string]any{"bootstrap_host": "p0", "bootstrap_port": nil, "data_parallel_rank": nil, "data_parallel_rank_decode": nil},
		},
		{
			name: "route=chat/batch=n3", route: Chat, batch: 3,
			body:     `{"messages":[{"role":"user","content":"hi"}],"n":3,` + unknownFields + `}`,
			opt:      PDOptions{Host: "p0", Port: ip(7), PrefillRank: ip(0), DecodeRank: ip(1)},
			prefill:  map[string]any{"bootstrap_host": []any{"p0", "p0", "p0"}, "bootstrap_port": []any{num(7), num(7), num(7)}, "data_parallel_rank": num(0)},
			decode:   map[string]any{"bootstrap_host": []any{"p0", "p0", "p0"}, "bootstrap_port": []any{num(7), num(7), num(7)}, "data_parallel_rank": num(0), "data_parallel_rank_decode": num(1)},
			prefixes: "chatcmpl-",
		},
		{
			name: "route=completions/prompt=string", route: Completions,
			body:     `{"model":"m","prompt":"once upon",` + unknownFields + `,"max_tokens":8}`,
			opt:      PDOptions{Host: "p0"},
			prefill:  map[string]any{"bootstrap_host": "p0", "bootstrap_port": nil},
			decode:   map[string]any{"bootstrap_host": "p0", "bootstrap_port": nil, "data_parallel_rank": nil, "data_parallel_rank_decode": nil},
			prefixes: "cmpl-",
		},
		{
			name: "route=completions/prompt=token-ids", route: Completions,
			body:     `{"prompt":[1,2,3],` + unknownFields + `}`,
			opt:      PDOptions{Host: "p0", Port: ip(5)},
			prefill:  map[string]any{"bootstrap_host": "p0", "bootstrap_port": num(5)},
			decode:   map[string]any{"bootstrap_host": "p0", "bootstrap_port": num(5), "data_parallel_rank": nil, "data_parallel_rank_decode": nil},
			prefixes: "cmpl-",
		},
		{
			name: "route=completions/batch=strings", route: Completions, batch: 2,
			body:     `{"prompt":["a","b"],` + unknownFields + `}`,
			opt:      PDOptions{Host: "p0"},
			prefill:  map[string]any{"bootstrap_host": []any{"p0", "p0"}, "bootstrap_port": []any{nil, nil}},
			decode:   map[string]any{"bootstrap_host": []any{"p0", "p0"}, "bootstrap_port": []any{nil, nil}, "data_parallel_rank": nil, "data_parallel_rank_decode": nil},
			prefixes: "cmpl-",
		},
		{
			name: "route=completions/batch=token-lists/rid=client", route: Completions, batch: 3,
			body:       `{"prompt":[[1,2],[3],[4,5,6]],"rid":["r0","r1","r2"],` + unknownFields + `}`,
			opt:        PDOptions{Host: "p0", Port: ip(1), Style: Routed, PrefillRank: ip(2)},
			clientRIDs: []string{"r0", "r1", "r2"},
			prefill:    map[string]any{"bootstrap_host": []any{"p0", "p0", "p0"}, "bootstrap_port": []any{num(1), num(1), num(1)}, "routed_dp_rank": num(2)},
			decode:     map[string]any{"bootstrap_host": []any{"p0", "p0", "p0"}, "bootstrap_port": []any{num(1), num(1), num(1)}, "routed_dp_rank": nil, "disagg_prefill_dp_rank": num(2)},
		},
		{
			// A client-sent bootstrap_room is replaced in place, not duplicated.
			name: "route=generate/text=string", route: Generate,
			body:     `{"text":"hello","bootstrap_room":5,"sampling_params":{"max_new_tokens":16,"stop":["\n"]},` + unknownFields + `}`,
			opt:      PDOptions{Host: "p0"},
			prefill:  map[string]any{"bootstrap_host": "p0", "bootstrap_port": nil},
			decode:   map[string]any{"bootstrap_host": "p0", "bootstrap_port": nil, "data_parallel_rank": nil, "data_parallel_rank_decode": nil},
			prefixes: "gnt-",
		},
		{
			name: "route=generate/batch=text", route: Generate, batch: 2,
			body:     `{"text":["a","b"],` + unknownFields + `}`,
			opt:      PDOptions{Host: "p0", Port: ip(8998)},
			prefill:  map[string]any{"bootstrap_host": []any{"p0", "p0"}, "bootstrap_port": []any{num(8998), num(8998)}},
			decode:   map[string]any{"bootstrap_host": []any{"p0", "p0"}, "bootstrap_port": []any{num(8998), num(8998)}, "data_parallel_rank": nil, "data_parallel_rank_decode": nil},
			prefixes: "gnt-",
		},
		{
			name: "route=generate/input_ids=flat", route: Generate,
			body:     `{"input_ids":[10,11,12],` + unknownFields + `}`,
			opt:      PDOptions{Host: "p0"},
			prefill:  map[string]any{"bootstrap_host": "p0", "bootstrap_port": nil},
			decode:   map[string]any{"bootstrap_host": "p0", "bootstrap_port": nil, "data_parallel_rank": nil, "data_parallel_rank_decode": nil},
			prefixes: "gnt-",
		},
		{
			name: "route=generate/batch=input_ids", route: Generate, batch: 1,
			body:     `{"input_ids":[[10,11,12]],` + unknownFields + `}`,
			opt:      PDOptions{Host: "p0", PrefillRank: ip(4), DecodeRank: ip(5)},
			prefill:  map[string]any{"bootstrap_host": []any{"p0"}, "bootstrap_port": []any{nil}, "data_parallel_rank": num(4)},
			decode:   map[string]any{"bootstrap_host": []any{"p0"}, "bootstrap_port": []any{nil}, "data_parallel_rank": num(4), "data_parallel_rank_decode": num(5)},
			prefixes: "gnt-",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body, err := Parse(tc.route, []byte(tc.body))
			require.NoError(t, err)
			require.Equal(t, tc.batch, body.Batch)
			legs := body.PD(newGen(), tc.opt)

			// Replay the documented draw order on a twin generator.
			twin := newGen()
			n := max(tc.batch, 1)
			rids := make([]any, n)
			rooms := make([]any, n)
			for i := range n {
				if tc.clientRIDs != nil {
					rids[i] = tc.clientRIDs[i]
				} else {
					rids[i] = twin.RID(tc.route)
					assert.Regexp(t, `^`+tc.prefixes+`[A-Za-z0-9]{24}-10\.1\.2\.3$`, rids[i])
				}
				room := twin.Room()
				rooms[i] = unum(room)
				assert.Equal(t, room, legs.Rooms[i])
				assert.Equal(t, rids[i], legs.RIDs[i])
			}
			require.Len(t, legs.RIDs, n)
			require.Len(t, legs.Rooms, n)
			var ridVal, roomVal any = rids[0], rooms[0]
			if tc.batch > 0 {
				ridVal, roomVal = rids, rooms
			}

			for _, leg := range []struct {
				name  string
				got   []byte
				extra map[string]any
			}{{"prefill", bytes.Join(legs.Prefill, nil), tc.prefill}, {"decode", bytes.Join(legs.Decode, nil), tc.decode}} {
				want := asMap(t, []byte(tc.body))
				want["rid"] = ridVal
				want["bootstrap_room"] = roomVal
				for k, v := range leg.extra {
					want[k] = v
				}
				assert.Equal(t, want, asMap(t, leg.got), "%s leg: %s", leg.name, leg.got)

				// Order and raw bytes: the original members in place (injected keys
				// replacing theirs), then the new keys in injection order.
				orig := topLevel(t, []byte(tc.body))
				got := topLevel(t, leg.got)
				require.GreaterOrEqual(t, len(got), len(orig))
				for i, m := range orig {
					assert.Equal(t, m.Key, got[i].Key, "%s leg key %d", leg.name, i)
					if _, injected := leg.extra[m.Key]; !injected && m.Key != "bootstrap_room" &&
						(m.Key != "rid" || tc.clientRIDs != nil) {
						assert.Equal(t, m.Raw, got[i].Raw, "%s leg: %s must be kept byte for byte", leg.name, m.Key)
					}
				}
				var appended []string
				for _, m := range got[len(orig):] {
					appended = append(appended, m.Key)
				}
				assert.Equal(t, injectionOrder(orig, leg.extra, tc.clientRIDs == nil), appended, "%s leg", leg.name)
			}
		})
	}
}

// injectionOrder lists the keys PD appends (those absent from the original), in its order.
func injectionOrder(orig []kv, extra map[string]any, genRID bool) []string {
	has := map[string]bool{}
	for _, m := range orig {
		has[m.Key] = true
	}
	var out []string
	for _, k := range []string{"rid", "bootstrap_host", "bootstrap_port", "bootstrap_room",
		"data_parallel_rank", "routed_dp_rank", "data_parallel_rank_decode", "disagg_prefill_dp_rank"} {
		_, inExtra := extra[k]
		wanted := inExtra || k == "bootstrap_room" || (k == "rid" && genRID)
		if wanted && !has[k] {
			out = append(out, k)
		}
	}
	return out
}

func TestPDSameRoomBothLegsAndFreshPerCall(t *testing.T) {
	t.Parallel()
	body, err := Parse(Generate, []byte(`{"text":["a","b","c"]}`))
	require.NoError(t, err)
	g := newGen()
	a := body.PD(g, PDOptions{Host: "h"})
	b := body.PD(g, PDOptions{Host: "h"})
	pa, da := asMap(t, bytes.Join(a.Prefill, nil)), asMap(t, bytes.Join(a.Decode, nil))
	assert.Equal(t, pa["bootstrap_room"], da["bootstrap_room"])
	assert.Equal(t, pa["rid"], da["rid"])
	assert.Len(t, pa["bootstrap_room"], 3)
	assert.NotEqual(t, a.Rooms, b.Rooms, "each attempt draws fresh rooms")
	assert.NotEqual(t, a.RIDs, b.RIDs, "each attempt draws fresh rids")
	seen := map[string]bool{}
	for _, r := range append(a.RIDs, b.RIDs...) {
		assert.False(t, seen[r], "rid %s repeated", r)
		seen[r] = true
	}
}

func TestPDDuplicateKeysReplacedOnce(t *testing.T) {
	t.Parallel()
	body, err := Parse(Generate, []byte(`{"bootstrap_host":"evil","text":"x","bootstrap_host":"evil2"}`))
	require.NoError(t, err)
	legs := body.PD(newGen(), PDOptions{Host: "good"})
	got := topLevel(t, bytes.Join(legs.Prefill, nil))
	assert.Equal(t, kv{"bootstrap_host", `"good"`}, got[0])
	assert.Equal(t, "text", got[1].Key)
	n := 0
	for _, m := range got {
		if m.Key == "bootstrap_host" {
			n++
		}
	}
	assert.Equal(t, 1, n)
}

func TestWithDPRank(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, want string
	}{
		{"append", `{"text":"x", "big": 12345678901234567890}`, `{"text":"x","big":12345678901234567890,"data_parallel_rank":3}`},
		{"replace in place", `{"data_parallel_rank":null,"text":"x"}`, `{"data_parallel_rank":3,"text":"x"}`},
		{"empty object", `{ }`, `{"data_parallel_rank":3}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := &Body{Raw: []byte(tc.body)}
			require.Nil(t, b.split())
			assert.Equal(t, tc.want, string(b.withDPRank(nil, 3)))
			assert.NotContains(t, string(b.withDPRank(nil, 3)), `"rid"`)
		})
	}
}

func TestFieldStyle(t *testing.T) {
	t.Parallel()
	for _, s := range []FieldStyle{Legacy, Routed} {
		got, err := ParseFieldStyle(s.String())
		require.NoError(t, err)
		assert.Equal(t, s, got)
	}
	_, err := ParseFieldStyle("modern")
	require.ErrorContains(t, err, `--dp-rank-fields "modern"`)
}

// rewriteSize bounds what Append writes (so a rewrite is one allocation), keys that need
// escaping included, and is tight for plain keys (a PD rewrite's buffer is not twice its size).
func TestRewriteSizeBoundsAppend(t *testing.T) {
	body, err := Parse(Generate, []byte(`{"text":"x","rid":"r","bootstrap_host":"h","sampling_params":{"max_new_tokens":4}}`))
	require.NoError(t, err)
	for _, set := range [][]Field{
		nil,
		{{"rid", []byte(`"new"`)}},
		{{"bootstrap_room", []byte(`12345`)}, {"data_parallel_rank", []byte(`null`)}},
		{{"odd\"key\\\n\u2028é", []byte(`1`)}, {"rid", []byte(`"x"`)}},
	} {
		out := body.Append(nil, set...)
		require.LessOrEqual(t, len(out), rewriteSize(body, set), "%q", out)
		require.True(t, json.Valid(out), "%q", out)
	}
	plain := []Field{{"bootstrap_room", []byte(`12345`)}, {"data_parallel_rank", []byte(`null`)}}
	out := body.Append(nil, plain...)
	assert.LessOrEqual(t, rewriteSize(body, plain)-len(out), 2*len(plain)+2, "a tight bound for plain keys")
}

// withDPRank returns the body for a regular-mode DP target (SPEC §1.5): the original plus
// "data_parallel_rank": rank, appended to dst. No rid is injected. It is what DPRankPieces
// must write.
func (b *Body) withDPRank(dst []byte, rank int) []byte {
	var num [20]byte
	return b.Append(dst, dpRankField(num[:0], rank))
}

// pdFields is pdFieldsInto returning the fields each leg sets as slices.
func (b *Body) pdFields(g *IDGen, o PDOptions) (legs PDLegs, prefill, decode []Field) {
	legs, fs := b.pdFieldsInto(g, o, nil)
	return legs, fs.p[:fs.np], fs.d[:fs.nd]
}
