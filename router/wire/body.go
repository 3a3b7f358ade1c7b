package wire

import (
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// Error is a request-body error: the client's fault, answered with Status (400) and an
// OpenAI-style body (see ErrorBody). Message names the field at fault.
type Error struct {
	Status  int    // HTTP status; always 400 from Parse
	Type    string // OpenAI error type; "invalid_request_error" from Parse
	Field   string // top-level field at fault ("messages"); "" when the whole body is at fault
	Message string // lowercase, names the field: `messages must not be empty`
}

// Error returns Message.
func (e *Error) Error() string { return e.Message }

// Body returns the OpenAI-style JSON error body for e.
func (e *Error) Body() []byte { return ErrorBody(e.Status, e.Type, e.Message) }

func badRequest(field, msg string) *Error {
	return &Error{Status: 400, Type: "invalid_request_error", Field: field, Message: msg}
}

func wrongType(path, want string, got []byte, field string) *Error {
	return badRequest(field, path+" must be "+want+", got "+kindOf(got).String())
}

// member locates one top-level member of the body: the raw key (quotes included) is
// raw[k0:k1], the raw value raw[v0:v1].
type member struct {
	k0, k1, v0, v1 uint32 // a body is at most maxBodyLen bytes: 16 bytes a member, not 32
}

// maxBodyLen is the largest body Parse takes (member offsets are 32-bit): far above any
// sensible --max-payload-size.
const maxBodyLen = math.MaxUint32

// Body is a parsed inference request body: a small typed view for routing plus every top-level
// member of the original, in order and byte for byte, so rewritten bodies (Append, PD,
// DPRankPieces) differ from the original only in the keys they set. A Body is immutable after
// Parse and safe for concurrent reads; it aliases Raw, which the caller must not modify.
type Body struct {
	Route Route  // the route the body was parsed for
	Raw   []byte // the original body (aliased, not copied)

	Stream   bool   // "stream": true
	N        int    // chat/completions "n"; 1 when absent, null, or the route is generate
	Logprobs bool   // logprobs asked for: generate "return_logprob", chat "logprobs", completions "logprobs" non-null
	Model    string // "model"; "" when absent or null
	Text     string // routing text, SPEC §1.2 (see doc.go for the exact rule)

	// Batch is the number of elements of a batch request (generate "text" list or "input_ids"
	// list of lists, completions "prompt" list of strings or of token lists, chat n > 1), or 0
	// for a single request. A one-element list is a batch of 1: SGLang then wants list-valued
	// rid and bootstrap fields.
	Batch int

	// RID is the client's "rid" for a single request and RIDs its list for a batch (length
	// Batch); HasRID says whether the client sent a non-null "rid" at all.
	RID    string
	RIDs   []string
	HasRID bool

	members  []member
	maxBatch int // Limits.MaxBatch while parsing; 0: no cap
}

// Limits bound what one request body may stand for: [ParseLimited] refuses a body beyond them
// with a 400 before anything is built per element, so a small body cannot make the router (or,
// in PD mode, both workers) do work or hold memory in proportion to a huge element count.
type Limits struct {
	// MaxBatch caps Batch: the elements of a generate "text" list or "input_ids" list of
	// lists, a completions "prompt" list, a batch of input_embeds, and chat "n". Counting
	// stops at the first element over the cap. 0 means no cap (n stays within MaxN).
	MaxBatch int
}

// batchError is the 400 of a batch over Limits.MaxBatch.
func batchError(field string, limit int) *Error {
	return badRequest(field, field+" is a batch of more than "+strconv.Itoa(limit)+
		" elements, over the router's limit --max-batch-size "+strconv.Itoa(limit)+": split it into smaller requests")
}

// overBatch reports whether a batch of count elements is over the cap.
func (b *Body) overBatch(count int) bool { return b.maxBatch > 0 && count > b.maxBatch }

// Size returns the number of generation requests the body stands for: Batch, or 1.
func (b *Body) Size() int {
	if b.Batch > 0 {
		return b.Batch
	}
	return 1
}

// Field returns the raw JSON value of the top-level member name (the last one if the key is
// duplicated) and whether it exists.
func (b *Body) Field(name string) ([]byte, bool) {
	for i := len(b.members) - 1; i >= 0; i-- {
		m := b.members[i]
		if keyIs(b.Raw[m.k0:m.k1], name) {
			return b.Raw[m.v0:m.v1], true
		}
	}
	return nil, false
}

// Parse parses raw as a request body for route. Errors are *Error (400,
// invalid_request_error) naming the field at fault: not JSON, not an object, a known field of
// the wrong type, a missing required field (chat "messages", completions "prompt", generate
// "text", "input_ids" or "input_embeds"), empty "messages", a batch whose "rid" is not a list
// of the batch size. Unknown fields are never an error. Parse never panics; it keeps no
// reference to anything but raw.
func Parse(route Route, raw []byte) (*Body, error) {
	return ParseLimited(route, raw, Limits{})
}

// ParseLimited is [Parse] within l: a batch over l.MaxBatch is a 400 naming the field and the
// limit.
func ParseLimited(route Route, raw []byte, l Limits) (*Body, error) {
	if route < Generate || route > Completions {
		return nil, badRequest("", "unsupported route")
	}
	b := &Body{Route: route, Raw: raw, N: 1, maxBatch: max(l.MaxBatch, 0)}
	if err := b.split(); err != nil {
		return nil, err
	}
	if err := b.view(); err != nil {
		return nil, err
	}
	return b, nil
}

// split validates raw as one JSON object and records its top-level members.
func (b *Body) split() *Error {
	raw := b.Raw
	i := skipSpace(raw, 0)
	if i >= len(raw) {
		return badRequest("", "request body is empty")
	}
	notJSON := func(err *syntaxError) *Error {
		return badRequest("", "request body is not valid JSON: "+err.Error())
	}
	if raw[i] != '{' {
		if validJSON(raw) {
			return badRequest("", "request body must be a JSON object, got "+kindOf(raw[i:]).String())
		}
		if _, err := skipValue(raw, i); err != nil {
			return notJSON(err)
		}
		return notJSON(unexpected(raw, i))
	}
	if uint64(len(raw)) > maxBodyLen {
		return badRequest("", "request body is larger than 4 GiB")
	}
	b.members = make([]member, 0, 8) // typical bodies have about as many top-level keys
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		i++
	} else {
		for {
			if i >= len(raw) || raw[i] != '"' {
				return notJSON(unexpected(raw, i))
			}
			k0 := i
			k1, _, err := skipString(raw, i)
			if err != nil {
				return notJSON(err)
			}
			i = skipSpace(raw, k1)
			if i >= len(raw) || raw[i] != ':' {
				return notJSON(unexpected(raw, i))
			}
			v0 := skipSpace(raw, i+1)
			v1, err := skipValue(raw, v0)
			if err != nil {
				return notJSON(err)
			}
			b.members = append(b.members, member{uint32(k0), uint32(k1), uint32(v0), uint32(v1)})
			i = skipSpace(raw, v1)
			if i < len(raw) && raw[i] == ',' {
				i = skipSpace(raw, i+1)
				continue
			}
			if i < len(raw) && raw[i] == '}' {
				i++
				break
			}
			return notJSON(unexpected(raw, i))
		}
	}
	if i = skipSpace(raw, i); i != len(raw) {
		return notJSON(&syntaxError{msg: "invalid character " + strconv.QuoteRune(rune(raw[i])) + " after top-level value", off: i})
	}
	return nil
}

// view fills the typed fields from the members and validates them for the route.
func (b *Body) view() *Error {
	var (
		stream, n, logprobs, retLogprob, rid, model []byte
		messages, prompt, text, inputIDs, embeds    []byte
	)
	var nameBuf [32]byte
	for _, m := range b.members {
		key := b.Raw[m.k0:m.k1]
		name := key[1 : len(key)-1]
		for _, c := range name {
			if c == '\\' {
				name = appendUnquote(nameBuf[:0], key)
				break
			}
		}
		v := b.Raw[m.v0:m.v1]
		if kindOf(v) == kindNull { // null means "not given" for every field we read
			v = nil
		}
		switch string(name) { // last duplicate wins
		case "stream":
			stream = v
		case "n":
			n = v
		case "logprobs":
			logprobs = v
		case "return_logprob":
			retLogprob = v
		case "rid":
			rid = v
		case "model":
			model = v
		case "messages":
			messages = v
		case "prompt":
			prompt = v
		case "text":
			text = v
		case "input_ids":
			inputIDs = v
		case "input_embeds":
			embeds = v
		}
	}

	if stream != nil {
		if kindOf(stream) != kindBool {
			return wrongType("stream", "a boolean", stream, "stream")
		}
		b.Stream = stream[0] == 't'
	}
	if model != nil {
		if kindOf(model) != kindString {
			return wrongType("model", "a string", model, "model")
		}
		b.Model = string(appendUnquote(nil, model))
	}

	var err *Error
	switch b.Route {
	case Chat:
		err = b.viewChat(messages, n, logprobs)
	case Completions:
		err = b.viewCompletions(prompt, n, logprobs)
	case Generate:
		err = b.viewGenerate(text, inputIDs, embeds, retLogprob)
	}
	if err != nil {
		return err
	}
	return b.viewRID(rid)
}

// MaxRoutingText caps the routing text in bytes (cut at a UTF-8 character boundary): the
// prefix the cache-aware policy matches on and its tree keeps a copy of. Real prompts are far
// shorter (a million tokens is a few MiB of text), so only an outsized body is routed on a
// prefix of its text rather than the whole of it — which would cost a copy of the body in the
// router per request, and in the tree until its next eviction.
const MaxRoutingText = 16 << 20

// routingText appends to dst the decoded JSON string s, cut so dst stays within MaxRoutingText.
func routingText(dst, s []byte) []byte {
	room := MaxRoutingText - len(dst)
	if room <= 0 {
		return dst
	}
	if len(s) < 2 {
		return dst
	}
	return appendUnquoted(dst, clipQuoted(s, room))
}

// clipQuoted returns the content of the raw JSON string s (without its quotes) cut to at most
// limit bytes, never inside an escape sequence (a \u surrogate pair counts as one) or a UTF-8
// sequence: the decoded prefix is then at most limit bytes and a prefix of the decoded whole.
// It aliases s.
func clipQuoted(s []byte, limit int) []byte {
	if len(s)-2 <= limit {
		return s[1 : len(s)-1]
	}
	end := 1 + limit // content is s[1:end]
	for i := 1; i < end; {
		if s[i] != '\\' {
			i++
			continue
		}
		w := 2
		if i+1 < len(s) && s[i+1] == 'u' {
			w = 6
			if i+12 <= len(s) && utf16.IsSurrogate(hex4(s, i+2)) && s[i+6] == '\\' && s[i+7] == 'u' {
				w = 12
			}
		}
		if i+w > end {
			end = i
			break
		}
		i += w
	}
	for end > 1 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[1:end]
}

// MaxN caps "n", the one field that multiplies a request without growing its body: a PD
// request is expanded into n rids and rooms, so an uncapped n let a 94-byte request cost the
// router gigabytes. 128 is OpenAI's own limit for n.
const MaxN = 128

func (b *Body) viewN(n []byte) *Error {
	if n == nil {
		return nil
	}
	if kindOf(n) != kindNumber {
		return wrongType("n", "an integer", n, "n")
	}
	f, perr := strconv.ParseFloat(string(n), 64)
	if perr != nil || f != float64(int64(f)) || f < 1 || f > MaxN {
		return badRequest("n", "n must be an integer between 1 and "+strconv.Itoa(MaxN)+" (OpenAI's limit), got "+string(n))
	}
	b.N = int(f)
	return nil
}

func (b *Body) viewChat(messages, n, logprobs []byte) *Error {
	if err := b.viewN(n); err != nil {
		return err
	}
	if b.N > 1 {
		b.Batch = b.N
	}
	if b.overBatch(b.Batch) {
		return batchError("n", b.maxBatch)
	}
	if logprobs != nil {
		if kindOf(logprobs) != kindBool {
			return wrongType("logprobs", "a boolean", logprobs, "logprobs")
		}
		b.Logprobs = logprobs[0] == 't'
	}
	if messages == nil {
		return badRequest("messages", "messages is required")
	}
	if kindOf(messages) != kindArray {
		return wrongType("messages", "an array", messages, "messages")
	}
	// The decoded text is never longer than the raw messages, nor than MaxRoutingText: one
	// allocation up front.
	text := make([]byte, 0, min(len(messages), MaxRoutingText))
	var err *Error
	idx := 0
	eachElem(messages, func(msg []byte) bool {
		i := idx
		path := func() string { return "messages[" + strconv.Itoa(i) + "]" } // built only on error
		idx++
		if kindOf(msg) != kindObject {
			err = wrongType(path(), "an object", msg, "messages")
			return false
		}
		var content, reasoning []byte
		eachMember(msg, func(k, v []byte) bool {
			if keyIs(k, "content") {
				content = v
			} else if keyIs(k, "reasoning_content") {
				reasoning = v
			}
			return true
		})
		switch kindOf(content) {
		case kindInvalid, kindNull:
		case kindString:
			text = addPiece(text, content)
		case kindArray:
			j := 0
			eachElem(content, func(part []byte) bool {
				jj := j
				ppath := func() string { return path() + ".content[" + strconv.Itoa(jj) + "]" }
				j++
				if kindOf(part) != kindObject {
					err = wrongType(ppath(), "an object", part, "messages")
					return false
				}
				if t, ok := lookup(part, "text"); ok {
					switch kindOf(t) {
					case kindString:
						text = addPiece(text, t)
					case kindNull:
					default:
						err = wrongType(ppath()+".text", "a string", t, "messages")
						return false
					}
				}
				return true
			})
			if err != nil {
				return false
			}
		default:
			err = wrongType(path()+".content", "a string or an array", content, "messages")
			return false
		}
		switch kindOf(reasoning) {
		case kindInvalid, kindNull:
		case kindString:
			text = addPiece(text, reasoning)
		default:
			err = wrongType(path()+".reasoning_content", "a string", reasoning, "messages")
			return false
		}
		return true
	})
	if err != nil {
		return err
	}
	if idx == 0 {
		return badRequest("messages", "messages must not be empty")
	}
	b.Text = ownedString(text)
	return nil
}

// ownedString returns b as a string without copying it: b must be a buffer of the caller's
// own that nothing writes to afterwards (a routing text built for the Body).
func ownedString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// addPiece appends the decoded JSON string s to text, separated by one space; empty strings
// add nothing (so the separator is always exactly one space).
// Text beyond MaxRoutingText is dropped.
func addPiece(text, s []byte) []byte {
	if len(s) <= 2 || len(text)+1 >= MaxRoutingText {
		return text
	}
	text = slices.Grow(text, min(len(s)+1, MaxRoutingText-len(text))) // decoding never grows valid UTF-8
	if len(text) > 0 {
		text = append(text, ' ')
	}
	return routingText(text, s)
}

// tokenForm classifies a prompt given as token ids: a flat list of numbers (one prompt,
// batch 0) or a non-empty list of lists of numbers (a batch). For the routing text it appends
// the ids of the first prompt joined by single spaces.
// A list of lists longer than limit (when limit > 0) is refused at its first element over it.
func tokenForm(v []byte, field string, text []byte, limit int) (batch int, out []byte, err *Error) {
	first := true
	nested := false
	count := 0
	eachElem(v, func(e []byte) bool {
		k := kindOf(e)
		if first {
			nested = k == kindArray
		}
		switch {
		case !nested && k == kindNumber:
			text = appendNumber(text, e)
		case nested && k == kindArray:
			if limit > 0 && count >= limit {
				err = batchError(field, limit)
				return false
			}
			ok := true
			eachElem(e, func(id []byte) bool {
				if kindOf(id) != kindNumber {
					ok = false
					return false
				}
				if first {
					text = appendNumber(text, id)
				}
				return true
			})
			if !ok {
				err = badRequest(field, field+"["+strconv.Itoa(count)+"] must be a list of token ids (integers)")
				return false
			}
		default:
			err = badRequest(field, field+" must be a list of token ids or a list of token-id lists")
			return false
		}
		first = false
		count++
		return true
	})
	if err != nil {
		return 0, text, err
	}
	if count == 0 {
		return 0, text, badRequest(field, field+" must not be empty")
	}
	if nested {
		return count, text, nil
	}
	return 0, text, nil
}

func appendNumber(text, n []byte) []byte {
	if len(text)+1+len(n) > MaxRoutingText {
		return text
	}
	if len(text) > 0 {
		text = append(text, ' ')
	}
	return append(text, n...)
}

// stringList handles a list of strings: its length and the first element as routing text. A
// list longer than limit (when limit > 0) is refused at its first element over it.
func stringList(v []byte, field string, limit int) (batch int, text []byte, err *Error) {
	eachElem(v, func(e []byte) bool {
		if limit > 0 && batch >= limit {
			err = batchError(field, limit)
			return false
		}
		if kindOf(e) != kindString {
			err = badRequest(field, field+"["+strconv.Itoa(batch)+"] must be a string, got "+kindOf(e).String())
			return false
		}
		if batch == 0 {
			text = routingText(nil, e)
		}
		batch++
		return true
	})
	if err == nil && batch == 0 {
		err = badRequest(field, field+" must not be empty")
	}
	return batch, text, err
}

func (b *Body) viewCompletions(prompt, n, logprobs []byte) *Error {
	if err := b.viewN(n); err != nil {
		return err
	}
	if logprobs != nil {
		switch kindOf(logprobs) {
		case kindNumber:
			b.Logprobs = true
		case kindBool:
			b.Logprobs = logprobs[0] == 't'
		default:
			return wrongType("logprobs", "an integer", logprobs, "logprobs")
		}
	}
	const want = "a string, a list of strings, a list of token ids or a list of token-id lists"
	switch kindOf(prompt) {
	case kindInvalid, kindNull:
		return badRequest("prompt", "prompt is required")
	case kindString:
		b.Text = ownedString(routingText(nil, prompt))
	case kindArray:
		var first []byte
		eachElem(prompt, func(e []byte) bool { first = e; return false })
		var text []byte
		var err *Error
		if kindOf(first) == kindString {
			b.Batch, text, err = stringList(prompt, "prompt", b.maxBatch)
		} else if first == nil {
			err = badRequest("prompt", "prompt must not be empty")
		} else {
			b.Batch, text, err = tokenForm(prompt, "prompt", nil, b.maxBatch)
		}
		if err != nil {
			return err
		}
		b.Text = string(text)
	default:
		return wrongType("prompt", want, prompt, "prompt")
	}
	return nil
}

func (b *Body) viewGenerate(text, inputIDs, embeds, retLogprob []byte) *Error {
	switch kindOf(retLogprob) {
	case kindInvalid, kindNull:
	case kindBool:
		b.Logprobs = retLogprob[0] == 't'
	case kindArray: // per-element flags of a batch
		var err *Error
		eachElem(retLogprob, func(e []byte) bool {
			if kindOf(e) != kindBool {
				err = badRequest("return_logprob", "return_logprob must be a boolean or a list of booleans")
				return false
			}
			b.Logprobs = b.Logprobs || e[0] == 't'
			return true
		})
		if err != nil {
			return err
		}
	default:
		return wrongType("return_logprob", "a boolean", retLogprob, "return_logprob")
	}
	switch kindOf(text) {
	case kindInvalid, kindNull:
	case kindString:
		b.Text = ownedString(routingText(nil, text))
	case kindArray:
		n, t, err := stringList(text, "text", b.maxBatch)
		if err != nil {
			return err
		}
		b.Batch, b.Text = n, string(t)
	default:
		return wrongType("text", "a string or a list of strings", text, "text")
	}
	switch kindOf(inputIDs) {
	case kindInvalid, kindNull:
	case kindArray:
		n, t, err := tokenForm(inputIDs, "input_ids", nil, b.maxBatch)
		if err != nil {
			return err
		}
		if text == nil { // text wins when both are given
			b.Batch, b.Text = n, string(t)
		}
	default:
		return wrongType("input_ids", "a list of token ids or a list of token-id lists", inputIDs, "input_ids")
	}
	if text == nil && inputIDs == nil {
		if embeds == nil {
			return badRequest("text", "one of text, input_ids or input_embeds is required")
		}
		if kindOf(embeds) != kindArray {
			return wrongType("input_embeds", "an array", embeds, "input_embeds")
		}
		// A batch of embeddings is a list of [tokens][hidden] matrices.
		n := 0
		batch := false
		eachElem(embeds, func(e []byte) bool {
			if n == 0 {
				eachElem(e, func(row []byte) bool { batch = kindOf(row) == kindArray; return false })
			}
			n++
			return !batch || !b.overBatch(n) // stop counting once over the cap
		})
		if batch {
			if b.overBatch(n) {
				return batchError("input_embeds", b.maxBatch)
			}
			b.Batch = n
		}
	}
	return nil
}

func (b *Body) viewRID(rid []byte) *Error {
	switch kindOf(rid) {
	case kindInvalid, kindNull:
		return nil
	case kindString:
		if b.Batch > 0 {
			return badRequest("rid", "rid must be a list of "+strconv.Itoa(b.Batch)+" strings for a batch request")
		}
		b.RID, b.HasRID = string(appendUnquote(nil, rid)), true
		return nil
	case kindArray:
		if b.Batch == 0 {
			return badRequest("rid", "rid must be a string for a single request, got a list")
		}
		rids := make([]string, 0, b.Batch)
		ok := true
		eachElem(rid, func(e []byte) bool {
			if kindOf(e) != kindString || len(rids) == b.Batch { // not a string, or one too many
				ok = false
				return false
			}
			rids = append(rids, string(appendUnquote(nil, e)))
			return true
		})
		if !ok || len(rids) != b.Batch {
			return badRequest("rid", "rid must be a list of "+strconv.Itoa(b.Batch)+" strings for a batch request")
		}
		b.RIDs, b.HasRID = rids, true
		return nil
	}
	return wrongType("rid", "a string or a list of strings", rid, "rid")
}
