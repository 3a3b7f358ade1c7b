package wire

import (
	"errors"
	"strconv"
)

// Field is one top-level key to set when re-serialising a Body: Value is raw JSON (a number,
// "null", a quoted string, an array, …) written as is.
type Field struct {
	Key   string
	Value []byte
}

// Append appends the body to dst with the given fields set and returns the extended slice. The
// result is the original object member by member (raw keys and values byte for byte, in order,
// without the original's insignificant white space); a field whose key already exists replaces
// the first occurrence in place (later duplicates of that key are dropped, so every JSON parser
// sees our value); the other fields are appended in the order given. Keys in set must be
// distinct.
func (b *Body) Append(dst []byte, set ...Field) []byte {
	var doneSmall [16]bool // no allocation for the usual handful of fields
	var done []bool
	if len(set) <= len(doneSmall) {
		done = doneSmall[:len(set)]
	} else {
		done = make([]bool, len(set))
	}
	dst = append(dst, '{')
	first := true
	for _, m := range b.members {
		key := b.Raw[m.k0:m.k1]
		j := -1
		for k := range set {
			if keyIs(key, set[k].Key) {
				j = k
				break
			}
		}
		var val []byte
		switch {
		case j < 0:
			val = b.Raw[m.v0:m.v1]
		case !done[j]:
			val, done[j] = set[j].Value, true
		default:
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, key...)
		dst = append(dst, ':')
		dst = append(dst, val...)
	}
	for k, f := range set {
		if done[k] {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendQuote(dst, f.Key)
		dst = append(dst, ':')
		dst = append(dst, f.Value...)
	}
	return append(dst, '}')
}

// Pieces is a body given as the concatenation of its pieces, in order: a rewritten body whose
// long runs alias the original (Body.Raw) rather than copy it, so a large body costs its
// rewrites almost nothing (SPEC §1.4 legs carry the prompt unchanged). Pieces and the bytes
// they alias are read-only.
type Pieces [][]byte

// Len returns the body's length in bytes.
func (p Pieces) Len() int {
	n := 0
	for _, b := range p {
		n += len(b)
	}
	return n
}

// minRef is the shortest run of the original body a rewritten body refers to rather than
// copies: shorter runs (keys, separators, small values) are copied into the rewrite's own
// bytes, so a body of many small members costs a rewrite about its size once, as a copy would,
// and never a slice header per few bytes; a longer run costs a slice header (24 bytes) per
// minRef bytes or more.
const minRef = 512

// smallBody is the size up to which a rewritten body is written whole (Append) rather than as
// pieces: copying a few KB costs less than the pieces' bookkeeping, and memory only matters
// for large bodies.
const smallBody = 4 << 10

// pieceWriter builds Pieces from runs of an original body (raw) and bytes of its own (lit).
// Runs of raw that touch are merged before they are referred to or copied. A copied piece is
// a slice of lit taken when it ends; lit is never reallocated under one (a full lit is
// replaced by a new buffer), so pieces taken stay valid.
type pieceWriter struct {
	raw    []byte
	out    Pieces
	lit    []byte // copied bytes
	r0, r1 int    // the pending run raw[r0:r1]; r0 < 0: none
	l0     int    // start in lit of the open copied piece; < 0: none
}

// run adds raw[a:b].
func (w *pieceWriter) run(a, b int) {
	if w.r0 >= 0 && w.r1 == a {
		w.r1 = b
		return
	}
	w.flush()
	w.r0, w.r1 = a, b
}

// byte adds c: as the next byte of the pending run when the original has c there, else
// copied.
func (w *pieceWriter) byte(c byte) {
	if w.r0 >= 0 && w.r1 < len(w.raw) && w.raw[w.r1] == c {
		w.r1++
		return
	}
	w.flush()
	w.grow(1)
	w.lit = append(w.lit, c)
}

// quote adds the JSON string of s, copied.
func (w *pieceWriter) quote(s string) {
	w.flush()
	w.grow(6*len(s) + 2) // the longest escaping
	w.lit = appendQuote(w.lit, s)
}

// bytes adds v, which must stay unmodified while the result is in use: referred to when long,
// copied otherwise.
func (w *pieceWriter) bytes(v []byte) {
	w.flush()
	w.add(v)
}

func (w *pieceWriter) add(v []byte) {
	if len(v) < minRef {
		w.grow(len(v))
		w.lit = append(w.lit, v...)
		return
	}
	w.close()
	w.out = append(w.out, v[:len(v):len(v)])
}

// grow opens a copied piece with room for n more bytes; when lit has not the room, the open
// piece ends and a new buffer is started.
func (w *pieceWriter) grow(n int) {
	if cap(w.lit)-len(w.lit) < n {
		w.close()
		w.lit = make([]byte, 0, max(2*cap(w.lit), n, 256))
	}
	if w.l0 < 0 {
		w.l0 = len(w.lit)
	}
}

// flush ends the pending run.
func (w *pieceWriter) flush() {
	if w.r0 < 0 {
		return
	}
	v := w.raw[w.r0:w.r1]
	w.r0 = -1
	w.add(v)
}

// close ends the open copied piece.
func (w *pieceWriter) close() {
	if w.l0 >= 0 && len(w.lit) > w.l0 {
		w.out = append(w.out, w.lit[w.l0:len(w.lit):len(w.lit)])
	}
	w.l0 = -1
}

// done returns the pieces.
func (w *pieceWriter) done() Pieces {
	w.flush()
	w.close()
	return w.out
}

// Pieces returns what Append(nil, set...) returns, as pieces: runs of the original of minRef
// bytes or more are referred to, not copied, so the result costs little more than the fields
// it sets however large the body. The result aliases b.Raw and the values in set.
func (b *Body) Pieces(set ...Field) Pieces {
	if len(b.Raw) <= smallBody {
		out := b.Append(make([]byte, 0, rewriteSize(b, set)), set...)
		return Pieces{out[:len(out):len(out)]}
	}
	var doneSmall [16]bool
	var done []bool
	if len(set) <= len(doneSmall) {
		done = doneSmall[:len(set)]
	} else {
		done = make([]bool, len(set))
	}
	// Everything but the long runs is copied into lit: size it for all of a small body and
	// for the fields, so that it rarely grows.
	litCap := 16
	for _, f := range set {
		litCap += 6*len(f.Key) + 4 // as quote asks room for it
		if len(f.Value) < minRef {
			litCap += len(f.Value)
		}
	}
	if len(b.Raw) <= 4*minRef {
		litCap += len(b.Raw)
	} else {
		litCap += 4 * minRef
	}
	// Each field adds at most two pieces (its key copied with what precedes it, its value).
	w := pieceWriter{raw: b.Raw, r0: -1, l0: -1, lit: make([]byte, 0, litCap), out: make(Pieces, 0, 2*len(set)+6)}
	if len(b.members) > 0 && b.members[0].k0 > 0 && b.Raw[b.members[0].k0-1] == '{' {
		w.run(int(b.members[0].k0)-1, int(b.members[0].k0))
	} else {
		w.byte('{')
	}
	first := true
	for _, m := range b.members {
		j := -1
		for k := range set {
			if keyIs(b.Raw[m.k0:m.k1], set[k].Key) {
				j = k
				break
			}
		}
		if j >= 0 && done[j] {
			continue
		}
		if !first {
			w.byte(',')
		}
		first = false
		w.run(int(m.k0), int(m.k1))
		w.byte(':')
		if j < 0 {
			w.run(int(m.v0), int(m.v1))
		} else {
			done[j] = true
			w.bytes(set[j].Value)
		}
	}
	for k, f := range set {
		if done[k] {
			continue
		}
		if !first {
			w.byte(',')
		}
		first = false
		w.quote(f.Key)
		w.byte(':')
		w.bytes(f.Value)
	}
	w.byte('}')
	return w.done()
}

// DPRankPieces is the regular-mode DP target's body (SPEC §1.5: the original plus
// "data_parallel_rank": rank, no rid) as Pieces referring to the original's long runs: what
// serve sends a regular-mode DP target, so a large prompt is not copied.
func (b *Body) DPRankPieces(rank int) Pieces {
	return b.Pieces(dpRankField(nil, rank))
}

func dpRankField(num []byte, rank int) Field {
	return Field{"data_parallel_rank", strconv.AppendInt(num, int64(rank), 10)}
}

// FieldStyle selects the names of the DP-rank fields injected on PD legs
// (--dp-rank-fields). The zero value is Legacy.
type FieldStyle uint8

// The DP-rank field styles (SPEC §1.4 step 4).
const (
	// Legacy: prefill leg "data_parallel_rank" (only when the prefill target has a rank);
	// decode leg always "data_parallel_rank" (prefill's rank or null) and
	// "data_parallel_rank_decode" (decode's rank or null).
	Legacy FieldStyle = iota
	// Routed: the newer SGLang names. Prefill leg "routed_dp_rank" (only when the prefill
	// target has a rank, like Legacy's prefill field); decode leg always "routed_dp_rank"
	// (decode's rank or null) and "disagg_prefill_dp_rank" (prefill's rank or null).
	Routed
)

// ParseFieldStyle parses "legacy" or "routed".
func ParseFieldStyle(s string) (FieldStyle, error) {
	switch s {
	case "legacy":
		return Legacy, nil
	case "routed":
		return Routed, nil
	}
	return 0, errors.New("wire: --dp-rank-fields " + strconv.Quote(s) + " is not legacy or routed")
}

// String returns "legacy" or "routed".
func (s FieldStyle) String() string {
	if s == Routed {
		return "routed"
	}
	return "legacy"
}

// PDOptions are the per-attempt inputs of PD injection.
type PDOptions struct {
	Host        string     // bootstrap_host: BootstrapHost(prefill URL)
	Port        *int       // bootstrap_port; nil → JSON null (the --prefill URL none form)
	PrefillRank *int       // DP rank of the prefill target; nil without --dp-aware
	DecodeRank  *int       // DP rank of the decode target; nil without --dp-aware
	Style       FieldStyle // names of the DP-rank fields
}

// PDLegs are the two rewritten bodies of one PD attempt and the ids they carry. The bodies are
// Pieces aliasing the original body: neither leg copies the prompt.
type PDLegs struct {
	Prefill Pieces   // body for the prefill worker
	Decode  Pieces   // body for the decode worker
	RIDs    []string // rid per element (length Body.Size()): the client's, or generated
	Rooms   []uint64 // bootstrap_room per element, the same on both legs
}

// PD builds both PD legs (SPEC §1.4 step 4). Both legs get rid, bootstrap_host,
// bootstrap_port and bootstrap_room (one room shared by both legs); the DP-rank fields follow
// o.Style. For a batch (Body.Batch > 0) the four fields are arrays of the batch size with a
// fresh rid and room per element; host and port repeat. The client's rid (or rid list) is kept
// as sent, in place; otherwise rids come from g. Random draws, for reproducibility: for each element in order, its
// rid (when generated) then its room. Call PD once per attempt: each call draws fresh ids.
// The legs are the bytes Append would write, as Pieces that refer to the original body's long
// runs instead of copying them (so a PD request costs about its body once, not three times);
// a batch's list values are written once and shared by both legs.
// A body up to smallBody is written whole for each leg, both legs in one buffer.
func (b *Body) PD(g *IDGen, o PDOptions) PDLegs {
	if len(b.Raw) > smallBody { // the pieces refer to the values: a buffer of their own
		legs, fs := b.pdFieldsInto(g, o, nil)
		legs.Prefill = b.Pieces(fs.p[:fs.np]...)
		legs.Decode = b.Pieces(fs.d[:fs.nd]...)
		return legs
	}
	// Both legs whole, in one buffer. The values are copied into it: written on the stack.
	var scratch [256]byte
	legs, fs := b.pdFieldsInto(g, o, scratch[:0])
	pf, df := fs.p[:fs.np], fs.d[:fs.nd]
	buf := make([]byte, 0, rewriteSize(b, pf)+rewriteSize(b, df))
	buf = b.Append(buf, pf...)
	np := len(buf)
	buf = b.Append(buf, df...)
	two := [][]byte{buf[:np:np], buf[np:len(buf):len(buf)]}
	legs.Prefill, legs.Decode = two[0:1:1], two[1:2:2]
	return legs
}

// rewriteSize bounds the size of b rewritten with set (Append): the body, the fields with their
// keys quoted (quotedLen) and separators. A bound, not the size: a field that replaces a
// member drops the member's value.
func rewriteSize(b *Body, set []Field) int {
	n := len(b.Raw) + 2
	for _, f := range set {
		n += quotedLen(f.Key) + 2 + len(f.Value)
	}
	return n
}

// quotedLen bounds the length of s quoted as a JSON string (appendQuote): exact for printable
// ASCII without quotes or backslashes (every key the router sets), six bytes a byte otherwise.
func quotedLen(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return 6*len(s) + 2
		}
	}
	return len(s) + 2
}

// pdFieldSets are the fields each leg of a PD attempt sets: prefill p[:np], decode d[:nd].
type pdFieldSets struct {
	p, d   [6]Field
	np, nd int
}

// pdFieldsInto draws the ids of one PD attempt (legs' RIDs and Rooms) and returns the fields
// each leg sets, their values written into vals (from its start; a buffer too small for them,
// nil included, is replaced by one of their own). The fields are returned, not written through
// a pointer, so that a caller's stack buffer stays on the stack when the caller copies them.
func (b *Body) pdFieldsInto(g *IDGen, o PDOptions, vals []byte) (legs PDLegs, fs pdFieldSets) {
	n := b.Size()
	legs = PDLegs{RIDs: make([]string, n), Rooms: make([]uint64, n)}
	// Generated rids of a batch are drawn into one buffer and sliced from one string: one
	// allocation per batch, not one per element.
	var gen []byte
	var small [96]byte // a single request's rid: drawn on the stack, then one string
	generated := !(b.Batch > 0 && b.RIDs != nil) && !(b.Batch == 0 && b.HasRID)
	if need := n * g.ridLen(b.Route); generated && need <= len(small) {
		gen = small[:0]
	} else if generated {
		gen = make([]byte, 0, need)
	}
	g.mu.Lock()
	for i := range n {
		switch {
		case b.Batch > 0 && b.RIDs != nil:
			legs.RIDs[i] = b.RIDs[i]
		case b.Batch == 0 && b.HasRID:
			legs.RIDs[i] = b.RID
		default:
			gen = g.appendRIDLocked(gen, b.Route)
		}
		legs.Rooms[i] = g.roomLocked()
	}
	g.mu.Unlock()
	if generated {
		all, w := string(gen), len(gen)/n
		for i := range n {
			legs.RIDs[i] = all[i*w : (i+1)*w]
		}
	}

	// All injected values live in one scratch buffer; fields slice into it.
	batch := b.Batch > 0
	if need := n*(len(legs.RIDs[0])+len(o.Host)+40) + 64; cap(vals) < need {
		vals = make([]byte, 0, need)
	}
	vals = vals[:0]
	mark := func() int { return len(vals) }
	open := func() {
		if batch {
			vals = append(vals, '[')
		}
	}
	closeArr := func() {
		if batch {
			vals = append(vals, ']')
		}
	}
	sep := func(i int) {
		if i > 0 {
			vals = append(vals, ',')
		}
	}
	r0 := mark()
	open()
	for i, rid := range legs.RIDs {
		sep(i)
		vals = appendQuote(vals, rid)
	}
	closeArr()
	h0 := mark()
	open()
	for i := range n {
		sep(i)
		vals = appendQuote(vals, o.Host)
	}
	closeArr()
	p0 := mark()
	open()
	for i := range n {
		sep(i)
		vals = appendOptInt(vals, o.Port)
	}
	closeArr()
	m0 := mark()
	open()
	for i, room := range legs.Rooms {
		sep(i)
		vals = strconv.AppendUint(vals, room, 10)
	}
	closeArr()
	pr0 := mark()
	vals = appendOptInt(vals, o.PrefillRank)
	dr0 := mark()
	vals = appendOptInt(vals, o.DecodeRank)
	end := mark()

	common := [4]Field{
		{"rid", vals[r0:h0]},
		{"bootstrap_host", vals[h0:p0]},
		{"bootstrap_port", vals[p0:m0]},
		{"bootstrap_room", vals[m0:pr0]},
	}
	prefillRank, decodeRank := vals[pr0:dr0], vals[dr0:end]
	// (Assigned element by element, not copied through slices or pointers: either would tell
	// the compiler that vals escapes.)
	first := 0
	if b.HasRID { // the client's rid stays as it was sent, byte for byte
		first = 1
	}
	np := 0
	for i := first; i < len(common); i++ {
		fs.p[np], fs.d[np] = common[i], common[i]
		np++
	}
	nd := np + 2
	// prefillKey is the prefill leg's own rank field; the decode leg always carries two.
	prefillKey := "data_parallel_rank"
	fs.d[nd-2] = Field{"data_parallel_rank", prefillRank}
	fs.d[nd-1] = Field{"data_parallel_rank_decode", decodeRank}
	if o.Style == Routed {
		prefillKey = "routed_dp_rank"
		fs.d[nd-2] = Field{"routed_dp_rank", decodeRank}
		fs.d[nd-1] = Field{"disagg_prefill_dp_rank", prefillRank}
	}
	if o.PrefillRank != nil {
		fs.p[np] = Field{prefillKey, prefillRank}
		np++
	}
	fs.np, fs.nd = np, nd
	return legs, fs
}

func appendOptInt(dst []byte, v *int) []byte {
	if v == nil {
		return append(dst, "null"...)
	}
	return strconv.AppendInt(dst, int64(*v), 10)
}
