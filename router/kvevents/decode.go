package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/pdrouter/pdrouter/router/kvindex"
)

// EndSeq is the sequence number of the replay end marker: SGLang's ROUTER answers a replay
// request with the buffered batches and then [END_SEQ, b""], END_SEQ being -1 as 8 signed
// big-endian bytes (sglang python/sglang/srt/utils/event_publisher.py,
// ZmqEventPublisher._service_replay).
const EndSeq = -1

// Message is one decoded publisher message.
type Message struct {
	Topic string // the topic frame ("" for replay replies, which carry none)
	Batch kvindex.Batch
	// End is set for the replay end marker (Batch.Seq == EndSeq, no events).
	End bool
	// Skipped counts events of a type this decoder does not know; they are ignored.
	Skipped int
}

// Decode decodes a live message: the three frames [topic, seq, payload] SGLang's PUB sends
// (event_publisher.py, ZmqEventPublisher._publisher_thread: seq as 8 big-endian bytes, payload
// the msgpack EventBatch). Errors name the frame or field at fault; Decode never panics.
func Decode(frames [][]byte) (Message, error) {
	if len(frames) != 3 {
		return Message{}, fmt.Errorf("kvevents: message has %d frames, want 3 [topic, seq, payload]", len(frames))
	}
	m, err := decodeSeqPayload(frames[1], frames[2])
	m.Topic = string(frames[0])
	return m, err
}

// DecodeReplay decodes one reply to a replay request as a DEALER receives it: ["", seq,
// payload] (SGLang's ROUTER sends [identity, "", seq, payload]; the identity is consumed by the
// DEALER), or ["", topic, seq, payload] when a publisher adds the topic frame (vLLM PR #45177;
// sglang issue #39991 proposes it). The end marker is seq -1 with an empty payload.
func DecodeReplay(frames [][]byte) (Message, error) {
	if len(frames) > 0 && len(frames[0]) == 0 {
		frames = frames[1:]
	}
	var m Message
	var err error
	switch len(frames) {
	case 2:
		m, err = decodeSeqPayload(frames[0], frames[1])
	case 3:
		m, err = decodeSeqPayload(frames[1], frames[2])
		m.Topic = string(frames[0])
	default:
		return Message{}, fmt.Errorf("kvevents: replay reply has %d frames after the delimiter, want [seq, payload] or [topic, seq, payload]", len(frames))
	}
	return m, err
}

func decodeSeqPayload(seqFrame, payload []byte) (Message, error) {
	if len(seqFrame) != 8 {
		return Message{}, fmt.Errorf("kvevents: seq frame has %d bytes, want 8 (big-endian)", len(seqFrame))
	}
	seq := int64(binary.BigEndian.Uint64(seqFrame))
	if seq == EndSeq {
		return Message{Batch: kvindex.Batch{Seq: EndSeq}, End: true}, nil
	}
	if seq < 0 {
		return Message{}, fmt.Errorf("kvevents: seq %d is negative (only -1, the replay end marker, is)", seq)
	}
	b, skipped, err := DecodePayload(payload)
	b.Seq = seq
	return Message{Batch: b, Skipped: skipped}, err
}

// DecodePayload decodes an EventBatch payload: the msgpack array [ts, events, attn_dp_rank]
// (event_publisher.py EventBatch: array_like, omit_defaults, so the rank may be absent; it is
// nil when unset). Elements past the third are ignored. It returns the batch (Seq unset) and
// the number of events of unknown type it skipped.
func DecodePayload(payload []byte) (b kvindex.Batch, skipped int, err error) {
	b, skipped, err = decodePayload(payload)
	if err != nil {
		err = fmt.Errorf("kvevents: %w", err)
	}
	return b, skipped, err
}

func decodePayload(payload []byte) (b kvindex.Batch, skipped int, err error) {
	d := msgpack.NewDecoder(bytes.NewReader(payload))
	n, err := arrayLen(d, "batch")
	if err != nil {
		return b, 0, err
	}
	if n < 2 {
		return b, 0, fmt.Errorf("batch has %d elements, want [ts, events(, attn_dp_rank)]", n)
	}
	if b.TS, err = decodeFloat(d, "batch ts"); err != nil {
		return b, 0, err
	}
	ne, err := arrayLen(d, "batch events")
	if err != nil {
		return b, 0, err
	}
	b.Events = make([]kvindex.Event, 0, min(ne, len(payload)/2))
	for i := range ne {
		ev, known, err := decodeEvent(d)
		if err != nil {
			return b, skipped, fmt.Errorf("event %d: %w", i, err)
		}
		if !known {
			skipped++
			continue
		}
		b.Events = append(b.Events, ev)
	}
	if n >= 3 {
		r, isNil, err := decodeInt(d, "batch attn_dp_rank", true)
		if err != nil {
			return b, skipped, err
		}
		if !isNil {
			if r < 0 || r > math.MaxInt32 {
				return b, skipped, fmt.Errorf("batch attn_dp_rank %d out of range", r)
			}
			b.Rank, b.HasRank = int(r), true
		}
		for range n - 3 {
			if err := d.Skip(); err != nil {
				return b, skipped, fmt.Errorf("batch: %w", err)
			}
		}
	}
	return b, skipped, nil
}

// decodeEvent decodes one event in either shape. known is false for an event type this
// package does not model (counted, not an error).
func decodeEvent(d *msgpack.Decoder) (ev kvindex.Event, known bool, err error) {
	c, err := d.PeekCode()
	if err != nil {
		return ev, false, fmt.Errorf("truncated: %w", err)
	}
	switch {
	case isArray(c):
		return decodeArrayEvent(d)
	case isMap(c):
		return decodeMapEvent(d)
	}
	return ev, false, fmt.Errorf("event is msgpack code 0x%02x, want an array or a map", c)
}

// Positional fields of the tagged-array shape, after the tag (sglang kv_events.py before PR
// #37482: BlockStored(block_hashes, parent_block_hash, token_ids, block_size, lora_id) with
// `medium` appended by PR #18205 and a metadata map {cache_salt, …} appended by PR #30827;
// BlockRemoved(block_hashes(, medium)); AllBlocksCleared()). msgspec's omit_defaults drops
// trailing defaults, so every optional field may be missing.
func decodeArrayEvent(d *msgpack.Decoder) (ev kvindex.Event, known bool, err error) {
	n, err := arrayLen(d, "event")
	if err != nil {
		return ev, false, err
	}
	if n < 1 {
		return ev, false, errors.New("event array is empty, want a type tag first")
	}
	tag, err := decodeString(d, "event tag")
	if err != nil {
		return ev, false, err
	}
	var f fields
	names := arrayFields[tag]
	for i := 1; i < n; i++ {
		name := ""
		if i-1 < len(names) {
			name = names[i-1]
		}
		if err := f.decode(d, name); err != nil {
			return ev, false, fmt.Errorf("%s: %w", tag, err)
		}
	}
	return f.event(tag)
}

var arrayFields = map[string][]string{
	"BlockStored":      {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "metadata"},
	"BlockRemoved":     {"block_hashes", "medium"},
	"AllBlocksCleared": {},
}

// decodeMapEvent decodes the map shape (sglang PR #37482: msgspec tagged structs without
// array_like, so a "type" field names the event and fields go by name, in no fixed order).
// Unknown fields are skipped.
func decodeMapEvent(d *msgpack.Decoder) (ev kvindex.Event, known bool, err error) {
	n, err := d.DecodeMapLen()
	if err != nil {
		return ev, false, fmt.Errorf("event map: %w", err)
	}
	var f fields
	tag := ""
	for range n {
		k, err := decodeString(d, "event field name")
		if err != nil {
			return ev, false, err
		}
		if k == "type" {
			if tag, err = decodeString(d, "event type"); err != nil {
				return ev, false, err
			}
			continue
		}
		if err := f.decode(d, k); err != nil {
			return ev, false, err
		}
	}
	if tag == "" {
		return ev, false, errors.New(`event map has no "type" field`)
	}
	return f.event(tag)
}

// fields collects the named fields of an event, whatever its shape.
type fields struct {
	hashes       []kvindex.Hash
	hasHashes    bool
	parent       kvindex.Hash
	hasParent    bool
	tokens       []uint32
	blockSize    int64
	hasBlockSize bool
	lora         int64
	medium       string
	salt         string
}

func (f *fields) decode(d *msgpack.Decoder, name string) error {
	var err error
	switch name {
	case "block_hashes":
		f.hashes, err = decodeHashes(d)
		f.hasHashes = err == nil
	case "parent_block_hash":
		var v int64
		var isNil bool
		v, isNil, err = decodeInt(d, name, true)
		f.parent, f.hasParent = kvindex.Hash(v), !isNil
	case "token_ids":
		f.tokens, err = decodeTokens(d)
	case "block_size":
		f.blockSize, _, err = decodeInt(d, name, false)
		if err == nil && (f.blockSize <= 0 || f.blockSize > math.MaxInt32) {
			err = fmt.Errorf("block_size %d out of range", f.blockSize)
		}
		f.hasBlockSize = err == nil
	case "lora_id":
		f.lora, _, err = decodeInt(d, name, true)
	case "medium":
		f.medium, err = decodeOptString(d, name)
	case "cache_salt": // a field of BlockStored since sglang PR #37482
		f.salt, err = decodeOptString(d, name)
	case "metadata": // {cache_salt, session_id} (sglang PR #30827, slot 7 of the array shape)
		err = f.decodeMetadata(d)
	default:
		err = d.Skip()
	}
	if err != nil {
		return fmt.Errorf("field %s: %w", orPosition(name), err)
	}
	return nil
}

func orPosition(name string) string {
	if name == "" {
		return "(extra position)"
	}
	return name
}

func (f *fields) decodeMetadata(d *msgpack.Decoder) error {
	c, err := d.PeekCode()
	if err != nil {
		return err
	}
	if c == msgpcode.Nil {
		return d.DecodeNil()
	}
	if !isMap(c) {
		return fmt.Errorf("msgpack code 0x%02x, want a map", c)
	}
	n, err := d.DecodeMapLen()
	if err != nil {
		return err
	}
	for range n {
		k, err := decodeString(d, "metadata key")
		if err != nil {
			return err
		}
		if k == "cache_salt" {
			if f.salt, err = decodeOptString(d, "cache_salt"); err != nil {
				return err
			}
			continue
		}
		if err := d.Skip(); err != nil {
			return err
		}
	}
	return nil
}

func (f *fields) event(tag string) (kvindex.Event, bool, error) {
	switch tag {
	case "BlockStored":
		if !f.hasHashes {
			return kvindex.Event{}, false, errors.New("BlockStored without block_hashes")
		}
		ev := kvindex.Event{Kind: kvindex.BlockStored, Hashes: f.hashes, Parent: f.parent, HasParent: f.hasParent,
			Tokens: f.tokens, LoRAID: f.lora, Medium: f.medium, CacheSalt: f.salt}
		if f.hasBlockSize {
			ev.BlockSize = int(f.blockSize)
		}
		return ev, true, nil
	case "BlockRemoved":
		if !f.hasHashes {
			return kvindex.Event{}, false, errors.New("BlockRemoved without block_hashes")
		}
		return kvindex.Event{Kind: kvindex.BlockRemoved, Hashes: f.hashes, Medium: f.medium}, true, nil
	case "AllBlocksCleared":
		return kvindex.Event{Kind: kvindex.AllBlocksCleared, Medium: f.medium}, true, nil
	}
	return kvindex.Event{}, false, nil
}

// decodeHashes reads a list of block hashes. SGLang publishes signed int64 (the digest's first
// 8 bytes read big-endian as signed, sglang python/sglang/srt/mem_cache/utils.py); a publisher
// writing them unsigned yields the same 64 bits, read back here as the same int64.
func decodeHashes(d *msgpack.Decoder) ([]kvindex.Hash, error) {
	n, err := arrayLen(d, "block_hashes")
	if err != nil {
		return nil, err
	}
	hs := make([]kvindex.Hash, 0, min(n, 1<<12))
	for i := range n {
		v, _, err := decodeInt(d, fmt.Sprintf("block_hashes[%d]", i), false)
		if err != nil {
			return nil, err
		}
		hs = append(hs, kvindex.Hash(v))
	}
	return hs, nil
}

// decodeTokens reads token ids. Under EAGLE SGLang publishes bigram pairs instead of ints
// (sglang PR #39610 notes it); the index keys on hashes, so such a list yields nil tokens
// rather than an error.
func decodeTokens(d *msgpack.Decoder) ([]uint32, error) {
	n, err := arrayLen(d, "token_ids")
	if err != nil {
		return nil, err
	}
	ts := make([]uint32, 0, min(n, 1<<12))
	flat := true
	for i := range n {
		c, err := d.PeekCode()
		if err != nil {
			return nil, err
		}
		if !isInt(c) {
			flat = false
			if err := d.Skip(); err != nil {
				return nil, err
			}
			continue
		}
		v, _, err := decodeInt(d, fmt.Sprintf("token_ids[%d]", i), false)
		if err != nil {
			return nil, err
		}
		if v < 0 || v > math.MaxUint32 {
			return nil, fmt.Errorf("token_ids[%d] = %d out of uint32 range", i, v)
		}
		ts = append(ts, uint32(v))
	}
	if !flat {
		return nil, nil
	}
	return ts, nil
}

func arrayLen(d *msgpack.Decoder, what string) (int, error) {
	c, err := d.PeekCode()
	if err != nil {
		return 0, fmt.Errorf("%s truncated: %w", what, err)
	}
	if !isArray(c) {
		return 0, fmt.Errorf("%s is msgpack code 0x%02x, want an array", what, c)
	}
	n, err := d.DecodeArrayLen()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

// decodeInt reads any msgpack integer width, signed or unsigned (a uint64 above MaxInt64 keeps
// its bits). nilOK allows nil (isNil reports it).
func decodeInt(d *msgpack.Decoder, what string, nilOK bool) (v int64, isNil bool, err error) {
	c, err := d.PeekCode()
	if err != nil {
		return 0, false, fmt.Errorf("%s truncated: %w", what, err)
	}
	if c == msgpcode.Nil {
		if !nilOK {
			return 0, true, fmt.Errorf("%s is nil, want an integer", what)
		}
		return 0, true, d.DecodeNil()
	}
	if !isInt(c) {
		return 0, false, fmt.Errorf("%s is msgpack code 0x%02x, want an integer", what, c)
	}
	v, err = d.DecodeInt64()
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", what, err)
	}
	return v, false, nil
}

func decodeFloat(d *msgpack.Decoder, what string) (float64, error) {
	c, err := d.PeekCode()
	if err != nil {
		return 0, fmt.Errorf("%s truncated: %w", what, err)
	}
	if c != msgpcode.Float && c != msgpcode.Double && !isInt(c) {
		return 0, fmt.Errorf("%s is msgpack code 0x%02x, want a number", what, c)
	}
	v, err := d.DecodeFloat64()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}

func decodeString(d *msgpack.Decoder, what string) (string, error) {
	c, err := d.PeekCode()
	if err != nil {
		return "", fmt.Errorf("%s truncated: %w", what, err)
	}
	if !msgpcode.IsString(c) && !msgpcode.IsBin(c) {
		return "", fmt.Errorf("%s is msgpack code 0x%02x, want a string", what, c)
	}
	s, err := d.DecodeString()
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return s, nil
}

func decodeOptString(d *msgpack.Decoder, what string) (string, error) {
	c, err := d.PeekCode()
	if err != nil {
		return "", err
	}
	if c == msgpcode.Nil {
		return "", d.DecodeNil()
	}
	return decodeString(d, what)
}

func isInt(c byte) bool {
	if msgpcode.IsFixedNum(c) {
		return true
	}
	switch c {
	case msgpcode.Uint8, msgpcode.Uint16, msgpcode.Uint32, msgpcode.Uint64,
		msgpcode.Int8, msgpcode.Int16, msgpcode.Int32, msgpcode.Int64:
		return true
	}
	return false
}

func isArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isMap(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}
