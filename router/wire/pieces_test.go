package wire

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The piecewise legs are byte for byte the bodies the contiguous rewrite wrote before them
// (legacyPD, kept below as the oracle), on a corpus of every body shape PD rewrites: chat,
// completions and generate; single, batches (text lists, input_ids lists of lists, prompt
// lists, chat n > 1), client rids, injected keys already present (and duplicated, and spelled
// with escapes); compact, spaced (Python's json.dumps) and odd white space; small bodies
// (copied whole) and large ones (the prompt referred to, not copied).
func TestPDPiecesMatchLegacyRewrite(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("lorem ipsum ", 400) // ≥ minRef: referred to
	corpus := []struct {
		route Route
		body  string
	}{
		{Chat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"x_custom":{"keep":1}}`},
		{Chat, `{"model": "m", "messages": [{"role": "user", "content": "` + big + `"}], "stream": true, "max_tokens": 8}`},
		{Chat, `{"messages":[{"role":"user","content":"` + big + `"}],"n":3,"rid":["a","b","c"]}`},
		{Chat, `{"messages":[{"role":"user","content":"hi"}],"n":4,` + unknownFields + `}`},
		{Chat, "\n\t {  \"messages\" :[{\"content\":\"" + big + "\"}] , \"rid\" : \"client\" }\r\n"},
		{Completions, `{"model":"m","prompt":"once upon",` + unknownFields + `,"max_tokens":8}`},
		{Completions, `{"prompt":["` + big + `","b","` + big + `"],"bootstrap_room":[1,2,3]}`},
		{Completions, `{"prompt":[[1,2],[3],[4,5,6]],"rid":["r0","r1","r2"],"data_parallel_rank":7}`},
		{Completions, `{"prompt": [1, 2, 3], "routed_dp_rank": null, "disagg_prefill_dp_rank": 1}`},
		{Generate, `{"text":"` + big + `","sampling_params":{"max_new_tokens":16}}`},
		{Generate, `{"text":["a","b"],"bootstrap_host":"evil","bootstrap_host":"evil2","\u0072id":["x","y"]}`},
		{Generate, `{"input_ids":[[10,11,12],[13]],"bootstrap_port":1,` + unknownFields + `}`},
		{Generate, `{"input_ids":[` + strings.TrimSuffix(strings.Repeat("123456, ", 500), ", ") + `], "text": null}`},
		{Generate, `{"text":` + list(`"x"`, 1024) + `}`},
		{Generate, `{"text":` + list(`"`+big[:600]+`"`, 3) + `,"stream":true,"bootstrap_room":5}`},
		{Generate, `{"input_embeds":[[[0.1,0.2]],[[0.3,0.4]]],"data_parallel_rank_decode":2}`},
	}
	options := []PDOptions{
		{Host: "10.0.0.1"},
		{Host: "p0", Port: ip(8998), PrefillRank: ip(1), DecodeRank: ip(3)},
		{Host: "[fd00::1]", Port: ip(1), DecodeRank: ip(0), Style: Routed},
		{Host: "p0", PrefillRank: ip(2), Style: Routed},
	}
	for i, c := range corpus {
		body, err := Parse(c.route, []byte(c.body))
		require.NoError(t, err, "corpus %d", i)
		// A regular-mode DP target's body (serve sends it as pieces too).
		require.Equal(t, string(body.withDPRank(nil, 5)), string(bytes.Join(body.DPRankPieces(5), nil)), "corpus %d DP rank", i)
		for _, o := range options {
			gNew := NewIDGen(rand.New(rand.NewPCG(uint64(i), 3)), "10.1.2.3")
			gOld := NewIDGen(rand.New(rand.NewPCG(uint64(i), 3)), "10.1.2.3")
			legs := body.PD(gNew, o)
			prefill, decode, rids, rooms := legacyPD(body, gOld, o)
			require.Equal(t, string(prefill), string(bytes.Join(legs.Prefill, nil)), "corpus %d prefill, %+v", i, o)
			require.Equal(t, string(decode), string(bytes.Join(legs.Decode, nil)), "corpus %d decode, %+v", i, o)
			assert.Equal(t, rids, legs.RIDs)
			assert.Equal(t, rooms, legs.Rooms)
			assert.Equal(t, len(prefill), legs.Prefill.Len())
			if len(c.body) > 4<<10 {
				assert.True(t, aliases(legs.Prefill, body.Raw) && aliases(legs.Decode, body.Raw),
					"corpus %d: a large body's legs refer to it", i)
				// Copied: what the leg adds, and at most a little of the original.
				for _, leg := range []Pieces{legs.Prefill, legs.Decode} {
					assert.Less(t, copied(leg, body.Raw), leg.Len()-len(body.Raw)+2<<10, "corpus %d: little is copied", i)
				}
			}
		}
	}
}

// Pieces equals Append for any fields, including none, on bodies of every spacing.
func TestPiecesMatchAppend(t *testing.T) {
	t.Parallel()
	big := `"` + strings.Repeat("é", 400) + `"`
	bodies := []string{
		`{}`, `{ }`, " {\n}\t", `{"a":1}`, `{ "a" : 1 }`, `{"a":1,"b":2,"a":3}`,
		`{"a":` + big + `,"b":` + big + `}`, `{"a": ` + big + `, "b" :` + big + ` ,"c":[` + big + `]}`,
		`{"\u0061":` + big + `,"x":{"a":1}}`, `{"k":` + big + `}`,
	}
	sets := [][]Field{
		nil,
		{{"a", []byte("9")}},
		{{"b", []byte(big)}, {"z", []byte("null")}},
		{{"new", []byte(`"v"`)}, {"a", []byte(big)}, {"k", []byte("[]")}},
		{{`q"uote`, []byte("1")}},
	}
	for _, raw := range bodies {
		b := &Body{Raw: []byte(raw)}
		require.Nil(t, b.split(), raw)
		for _, set := range sets {
			want := string(b.Append(nil, set...))
			p := b.Pieces(set...)
			assert.Equal(t, want, string(bytes.Join(p, nil)), "%s with %v", raw, set)
			assert.Equal(t, len(want), p.Len())
			for _, piece := range p {
				assert.NotEmpty(t, piece)
				assert.Equal(t, len(piece), cap(piece), "a piece cannot be appended to in place")
			}
		}
	}
}

// A body of many small members costs each leg about its size (copied), not a slice header per
// member.
func TestPiecesOfManySmallMembers(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	sb.WriteString(`{"text":"x"`)
	for range 10000 {
		sb.WriteString(`, "a": 1`)
	}
	sb.WriteString(`}`)
	b, err := Parse(Generate, []byte(sb.String()))
	require.NoError(t, err)
	legs := b.PD(NewIDGen(NewRand(1), "h"), PDOptions{Host: "h"})
	assert.Less(t, len(legs.Prefill), 64, "pieces: %d", len(legs.Prefill))
}

// aliases reports whether some piece of p lies inside raw.
func aliases(p Pieces, raw []byte) bool {
	return copied(p, raw) < p.Len()
}

// copied is the number of bytes of p that do not lie inside raw.
func copied(p Pieces, raw []byte) int {
	n := 0
	lo, hi := &raw[0], &raw[len(raw)-1]
	for _, b := range p {
		if len(b) == 0 || !inside(&b[0], lo, hi) {
			n += len(b)
		}
	}
	return n
}

// inside reports whether p points into [lo, hi].
func inside(p, lo, hi *byte) bool {
	a := uintptr(unsafe.Pointer(p))
	return a >= uintptr(unsafe.Pointer(lo)) && a <= uintptr(unsafe.Pointer(hi))
}

// legacyPD is Body.PD as it was before the legs became Pieces (commit 9d52036): the same
// fields, both legs written whole with Append. It is the oracle of
// TestPDPiecesMatchLegacyRewrite.
func legacyPD(b *Body, g *IDGen, o PDOptions) (prefill, decode []byte, rids []string, rooms []uint64) {
	legs, pf, df := b.pdFields(g, o)
	return b.Append(nil, pf...), b.Append(nil, df...), legs.RIDs, legs.Rooms
}
