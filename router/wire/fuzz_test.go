package wire

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// injectedKeys are the keys PD may set; every other original member must survive untouched.
var injectedKeys = map[string]bool{
	"rid": true, "bootstrap_host": true, "bootstrap_port": true, "bootstrap_room": true,
	"data_parallel_rank": true, "data_parallel_rank_decode": true,
	"routed_dp_rank": true, "disagg_prefill_dp_rank": true,
}

// members decodes the top level of a JSON object with encoding/json (independent of this
// package's scanner): keys decoded, values raw.
func members(b []byte) ([]kv, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var out []kv
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		out = append(out, kv{tok.(string), string(raw)})
	}
	return out, true
}

func kept(ms []kv, keepRID bool) []kv {
	var out []kv
	for _, m := range ms {
		if !injectedKeys[m.Key] || (keepRID && m.Key == "rid") {
			out = append(out, m)
		}
	}
	return out
}

func FuzzParse(f *testing.F) {
	seeds := []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":"b","reasoning_content":"c"}],"n":2}`,
		`{"prompt":["a","b"],"rid":["x","y"],"big":12345678901234567890}`,
		`{"prompt":[[1,2],[3]],"logprobs":1}`,
		`{"prompt":[1,2,3]}`,
		`{"text":["a","b"],"return_logprob":[true,false]}`,
		`{"input_ids":[[1],[2,3]],"rid":"x"}`,
		`{"text":"x","rid":"r","bootstrap_room":1,"bootstrap_room":2,"\u0072id":"s"}`,
		`{"text":"x","x":{"nested":[{"deep":["é\ud83d\ude00"]}]},"f":-1.5e-300}`,
		`{"input_embeds":[[[0.1]]]}`,
		"{\"text\":\"\\ud800\\u0041 \\ud83d\\ude00 \xed\xa0\x80 \xff ok\",\"k\\n\":\"\\\"\\\\\\/\\b\"}",
		`[]`, `{`, `{"messages":[]}`, `null`, `{"text":"\x"}`, "{\"text\":\"\xff\"}",
		strings.Repeat("[", 100), `{"a":` + strings.Repeat("{\"a\":", 50) + `1` + strings.Repeat("}", 50) + `}`,
	}
	for i, s := range seeds {
		f.Add(uint8(i%3), []byte(s))
	}
	f.Fuzz(func(t *testing.T, r uint8, data []byte) {
		if got, want := validJSON(data), json.Valid(data); got != want {
			t.Fatalf("validJSON(%q) = %v, encoding/json says %v", data, got, want)
		}
		route := Routes[int(r)%len(Routes)]
		body, err := Parse(route, data)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T is not *Error", err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("Parse accepted invalid JSON %q", data)
		}
		orig, ok := members(data)
		if !ok {
			t.Fatalf("accepted body is not an object: %q", data)
		}
		for i := range len(body.members) { // string decoding agrees with encoding/json
			k, v := body.member(i)
			for _, raw := range [][]byte{k, v} {
				var want string
				if kindOf(raw) == kindString && json.Unmarshal(raw, &want) == nil {
					if got := string(appendUnquote(nil, raw)); got != want {
						t.Fatalf("unquote %q = %q, encoding/json says %q", raw, got, want)
					}
				}
			}
		}
		g := NewIDGen(rand.New(rand.NewPCG(1, 2)), "fuzz")
		for _, o := range []PDOptions{
			{Host: "h"},
			{Host: "[::1]", Port: ip(1), PrefillRank: ip(0), DecodeRank: ip(1), Style: Routed},
		} {
			legs := body.PD(g, o)
			if len(legs.RIDs) != body.Size() || len(legs.Rooms) != body.Size() {
				t.Fatalf("ids: %d rids, %d rooms for size %d", len(legs.RIDs), len(legs.Rooms), body.Size())
			}
			for _, leg := range [][]byte{bytes.Join(legs.Prefill, nil), bytes.Join(legs.Decode, nil)} {
				if !json.Valid(leg) {
					t.Fatalf("leg is not JSON: %s", leg)
				}
				got, ok := members(leg)
				if !ok {
					t.Fatalf("leg is not an object: %s", leg)
				}
				want := kept(orig, body.HasRID)
				have := kept(got, body.HasRID)
				if len(want) != len(have) {
					t.Fatalf("members lost or added:\n%v\n%v", want, have)
				}
				for i := range want {
					if want[i] != have[i] {
						t.Fatalf("member %d changed: %v → %v", i, want[i], have[i])
					}
				}
				// The rewritten leg parses to the same view.
				again, err := Parse(route, leg)
				if err != nil {
					t.Fatalf("leg does not parse: %v\n%s", err, leg)
				}
				if again.Text != body.Text || again.Batch != body.Batch {
					t.Fatalf("leg view differs: %q/%d vs %q/%d", again.Text, again.Batch, body.Text, body.Batch)
				}
			}
		}
		for _, set := range [][]Field{nil, {{"rid", []byte(`"r"`)}, {"bootstrap_room", []byte("[1,2]")}}} {
			if p, a := bytes.Join(body.Pieces(set...), nil), body.Append(nil, set...); !bytes.Equal(p, a) {
				t.Fatalf("Pieces and Append differ:\n%s\n%s", p, a)
			}
		}
		if dp := body.withDPRank(nil, 3); !json.Valid(dp) {
			t.Fatalf("dp body is not JSON: %s", dp)
		}
	})
}

func FuzzSSE(f *testing.F) {
	f.Add([]byte("data: a\n\ndata: [DONE]\n\n"), []byte{1, 2, 3})
	f.Add([]byte("data: a\r\n\r\ndata: b\r\n\r\n"), []byte{7, 1})
	f.Add([]byte("data: a\r\rdata: b\r"), []byte{8, 1, 1})
	f.Add([]byte(": c\n\nevent: e\nid: 1\ndata: x\ndata: y\n\n\n\ndata"), []byte{0, 3, 250})
	f.Add([]byte(decodeStream), []byte{5, 9, 13, 2})
	f.Add([]byte("\r\n\r\r\n\n"), []byte{1})
	f.Fuzz(func(t *testing.T, stream, cuts []byte) {
		want := feedAll(stream)
		var chunks [][]byte
		rest := stream
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if len(cuts) > 0 {
				n = min(int(cuts[i%len(cuts)]), len(rest))
			}
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
			if i > 1<<16 {
				chunks = append(chunks, rest)
				break
			}
		}
		got := feedAll(chunks...)
		if len(got) != len(want) {
			t.Fatalf("%d events chunked, %d whole", len(got), len(want))
		}
		// Fed in place (FeedView) through one reused read buffer, as the relay feeds it: the
		// same events, and Emitted passes the bytes of each read's events through.
		viewed, emitted := feedViewAll(chunks...)
		if !slices.Equal(viewed, want) {
			t.Fatalf("FeedView events %+v, Feed events %+v", viewed, want)
		}
		var joined []byte
		for _, e := range want {
			joined = append(joined, e.Raw...)
		}
		if string(joined) != emitted {
			t.Fatalf("Emitted %q, events' Raw %q", emitted, joined)
		}
		var raw []byte
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("event %d: %+v chunked, %+v whole", i, got[i], want[i])
			}
			raw = append(raw, want[i].Raw...)
		}
		// Raw reproduces the stream, except trailing blank lines.
		if !bytes.HasPrefix(stream, raw) || strings.Trim(string(stream[len(raw):]), "\r\n") != "" {
			t.Fatalf("raw events %q do not reproduce %q", raw, stream)
		}
		// The merger's output is chunking-independent too.
		pre := []byte(`[[-1,1,null]]`)
		if a, b := mergeChunks(pre, stream), mergeChunks(pre, chunks...); a != b {
			t.Fatalf("merger output depends on chunking:\n%q\n%q", a, b)
		}
	})
}

func FuzzMergeLogprobs(f *testing.F) {
	f.Add([]byte(`{"meta_info":{"input_token_logprobs":[[-1,1,null]]}}`), []byte(`{"text":"x","meta_info":{"input_token_logprobs":[[-2,2,null]]}}`))
	f.Add([]byte(`[{"meta_info":{"input_token_logprobs":[[1]]}}]`), []byte(`[{"meta_info":{"input_token_logprobs":[]}},{"a":1}]`))
	f.Add([]byte(`{"meta_info":{"input_token_logprobs":[ ]}}`), []byte(` {"meta_info" : {"input_token_logprobs" : [ 1 ] } } `))
	f.Add([]byte(`{`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, prefill, decode []byte) {
		out := MergeLogprobs(prefill, decode)
		if json.Valid(decode) && !json.Valid(out) {
			t.Fatalf("merge of valid JSON is invalid: %q + %q → %q", prefill, decode, out)
		}
		if !json.Valid(prefill) && !bytes.Equal(out, decode) {
			t.Fatalf("invalid prefill must leave decode unchanged")
		}
	})
}
