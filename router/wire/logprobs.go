package wire

import "bytes"

// logprobSpan returns the offsets in obj of the value of meta_info.input_token_logprobs when
// obj is a JSON object and that value is an array.
func logprobSpan(obj []byte) (a0, a1 int, ok bool) {
	if kindOf(obj) != kindObject {
		return 0, 0, false
	}
	m0, m1, ok := lookupAt(obj, "meta_info")
	if !ok || kindOf(obj[m0:m1]) != kindObject {
		return 0, 0, false
	}
	l0, l1, ok := lookupAt(obj[m0:m1], "input_token_logprobs")
	if !ok || kindOf(obj[m0+l0:m0+l1]) != kindArray {
		return 0, 0, false
	}
	return m0 + l0, m0 + l1, true
}

// arrayInner returns the elements of a raw JSON array without the brackets and outer space.
func arrayInner(arr []byte) []byte { return bytes.TrimSpace(arr[1 : len(arr)-1]) }

// appendMerged appends obj with prefill's input_token_logprobs elements (pre, a raw array)
// prepended to its own meta_info.input_token_logprobs; ok is false (and dst unchanged) when obj
// has no such array. Everything else in obj is copied byte for byte.
func appendMerged(dst, obj, pre []byte) ([]byte, bool) {
	a0, a1, ok := logprobSpan(obj)
	if !ok {
		return dst, false
	}
	pi, di := arrayInner(pre), arrayInner(obj[a0:a1])
	dst = append(dst, obj[:a0+1]...)
	dst = append(dst, pi...)
	if len(pi) > 0 && len(di) > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, di...)
	return append(dst, obj[a1-1:]...), true
}

// MergeLogprobs merges a non-streaming PD response (SPEC §1.4 step 7): it returns decode with
// prefill's meta_info.input_token_logprobs prepended to decode's. For batch responses (JSON
// arrays) elements are merged pairwise. Anything that does not fit (invalid JSON, a missing or
// non-array field, an object against an array) returns decode unchanged; so does a successful
// merge of nothing. Bytes outside the merged arrays are kept as they are.
func MergeLogprobs(prefill, decode []byte) []byte {
	p, d := bytes.TrimSpace(prefill), bytes.TrimSpace(decode)
	if !validJSON(p) || !validJSON(d) {
		return decode
	}
	switch {
	case kindOf(p) == kindObject && kindOf(d) == kindObject:
		a0, a1, ok := logprobSpan(p)
		if !ok {
			return decode
		}
		out, ok := appendMerged(make([]byte, 0, len(d)+a1-a0), d, p[a0:a1])
		if !ok {
			return decode
		}
		return out
	case kindOf(p) == kindArray && kindOf(d) == kindArray:
		var pre [][]byte
		eachElem(p, func(e []byte) bool {
			var lp []byte
			if a0, a1, ok := logprobSpan(e); ok {
				lp = e[a0:a1]
			}
			pre = append(pre, lp)
			return true
		})
		out := make([]byte, 0, len(d)+len(p))
		out = append(out, '[')
		i, merged := 0, false
		eachElem(d, func(e []byte) bool {
			if i > 0 {
				out = append(out, ',')
			}
			ok := false
			if i < len(pre) && pre[i] != nil {
				out, ok = appendMerged(out, e, pre[i])
			}
			if !ok {
				out = append(out, e...)
			}
			merged = merged || ok
			i++
			return true
		})
		if !merged {
			return decode
		}
		return append(out, ']')
	}
	return decode
}

// PrefillLogprobs extracts the prefill leg's meta_info.input_token_logprobs (a raw JSON array,
// copied) for a streamed merge. body is the whole prefill response: a JSON object, or an SSE
// stream whose first data event is that object (what a prefill worker sends for stream:true).
// It returns nil when there is nothing to merge (including batch responses).
func PrefillLogprobs(body []byte) []byte {
	t := bytes.TrimSpace(body)
	if len(t) > 0 && (t[0] == '{' || t[0] == '[') && validJSON(t) {
		if a0, a1, ok := logprobSpan(t); ok {
			return bytes.Clone(t[a0:a1])
		}
		return nil
	}
	var p Parser
	p.Feed(body)
	p.Close()
	for {
		ev, ok := p.Next()
		if !ok {
			return nil
		}
		if !ev.HasData() || ev.IsDone() {
			continue
		}
		d := bytes.TrimSpace(ev.Data)
		if !validJSON(d) {
			return nil
		}
		if a0, a1, ok := logprobSpan(d); ok {
			return bytes.Clone(d[a0:a1])
		}
		return nil
	}
}

// AppendMergedEvent appends ev to dst with prefill's logprobs (from PrefillLogprobs) prepended
// to its meta_info.input_token_logprobs. A merged event is re-encoded as its "event:" and "id:"
// fields (when present), its data lines and a blank line; every other event — no data,
// `[DONE]`, not a JSON object, no logprob array, or pre == nil — is appended as ev.Raw, untouched.
func AppendMergedEvent(dst, pre []byte, ev *Event) []byte {
	if pre == nil || !ev.HasData() || ev.IsDone() {
		return append(dst, ev.Raw...)
	}
	d := bytes.TrimSpace(ev.Data)
	if kindOf(d) != kindObject || !validJSON(d) {
		return append(dst, ev.Raw...)
	}
	if _, _, ok := logprobSpan(d); !ok {
		return append(dst, ev.Raw...)
	}
	if ev.Name != nil {
		dst = append(dst, "event: "...)
		dst = append(dst, ev.Name...)
		dst = append(dst, '\n')
	}
	if ev.ID != nil {
		dst = append(dst, "id: "...)
		dst = append(dst, ev.ID...)
		dst = append(dst, '\n')
	}
	mark := len(dst)
	dst = append(dst, "data: "...)
	dst, _ = appendMerged(dst, d, pre)
	if indexEOL(dst[mark:]) >= 0 {
		// A JSON text may span lines (pretty-printed); each line needs its own "data:" field.
		merged := bytes.ReplaceAll(dst[mark+len("data: "):], []byte("\r\n"), []byte("\n"))
		merged = bytes.ReplaceAll(merged, []byte("\r"), []byte("\n"))
		return AppendEvent(dst[:mark], "", merged)
	}
	return append(dst, '\n', '\n')
}
