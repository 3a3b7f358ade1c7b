package wire

import (
	"bytes"
)

// Event is one server-sent event. Its slices alias the Parser's buffer and stay valid only
// until the next call to the Parser's Feed, Next or Close.
type Event struct {
	// Raw is the event exactly as received: any blank lines before it, its lines and the blank
	// line ending it (absent for an unterminated event at end of input). Relaying Raw of every
	// event reproduces the upstream stream byte for byte (minus trailing blank lines at EOF).
	Raw []byte
	// Data is the value of its data fields joined by "\n" (one leading space after "data:" is
	// dropped, as the SSE standard says); nil when it has no data field.
	Data []byte
	Name []byte // value of the last "event:" field; nil if none
	ID   []byte // value of the last "id:" field; nil if none

	joined bool // Data was joined from several data lines in the Parser's scratch buffer
}

// Joined reports whether Data was joined from several data lines: it is then in the Parser's
// scratch buffer, which the next such event overwrites, rather than a slice of Raw.
func (e *Event) Joined() bool { return e.joined }

// HasData reports whether the event has at least one data field. Events without one (comments
// such as ": keep-alive", bare "event:" lines) are returned so that relays can pass them on.
func (e *Event) HasData() bool { return e.Data != nil }

// IsDone reports whether the event is the `data: [DONE]` end-of-stream marker.
func (e *Event) IsDone() bool { return IsDone(e.Data) }

// IsDone reports whether an event's data is the `[DONE]` marker (surrounding space ignored).
func IsDone(data []byte) bool { return string(bytes.TrimSpace(data)) == "[DONE]" }

// Parser splits a byte stream into server-sent events, incrementally: Feed it chunks as they
// arrive, then call Next until it returns false. The result does not depend on how the stream
// was chunked. Lines may end in "\n", "\r\n" or "\r"; an event ends at a blank line. One case
// waits for more input: an event whose last received byte is a "\r" is held until the next byte
// (or Close) shows whether a "\n" follows. The zero value is ready to use; a Parser is not safe
// for concurrent use.
//
// A relay that passes events through feeds with FeedView and writes Emitted: complete events
// are then found in the caller's chunk and written from it, and only an event split across
// chunks is copied (it must outlive the chunk).
type Parser struct {
	buf     []byte // the bytes being parsed: own, or the caller's chunk (view)
	own     []byte // the parser's storage
	view    bool   // buf is the caller's chunk (FeedView)
	start   int    // first byte of the current event (including its leading blank lines)
	line    int    // first byte of the current line
	scan    int    // where the search for the next line end resumes
	mark    int    // first byte of the events Emitted has not returned
	content bool   // the current event has a non-blank line
	eof     bool   // Close was called
	data    []byte
}

// Feed appends a chunk of the stream. It copies chunk; the caller may reuse it.
func (p *Parser) Feed(chunk []byte) {
	p.Retain()
	if p.start > 0 && (p.start == len(p.buf) || p.start >= cap(p.buf)/2) {
		n := copy(p.buf, p.buf[p.start:])
		p.buf = p.buf[:n]
		p.line -= p.start
		p.scan -= p.start
		p.start = 0
	}
	p.buf = append(p.buf, chunk...)
	p.own = p.buf
	p.mark = p.start
}

// FeedView is Feed without the copy when the parser holds nothing (the previous events were all
// returned): it then parses chunk in place, so chunk must stay unchanged until the next Feed,
// FeedView or Retain, and the events alias it. Otherwise it copies, as Feed does.
func (p *Parser) FeedView(chunk []byte) {
	if p.start < len(p.buf) || p.eof {
		p.Feed(chunk)
		return
	}
	if !p.view {
		p.own = p.buf[:0]
	}
	p.buf, p.view = chunk, true
	p.start, p.line, p.scan, p.mark, p.content = 0, 0, 0, 0, false
}

// Retain copies what the parser still holds of a FeedView chunk (an event not complete yet)
// into its own storage, so the caller may reuse the chunk. Events returned before stay
// aliased to the chunk, and Emitted forgets them.
func (p *Parser) Retain() {
	if !p.view {
		return
	}
	p.own = append(p.own[:0], p.buf[p.start:]...)
	p.buf, p.view = p.own, false
	p.line -= p.start
	p.scan -= p.start
	p.start, p.mark = 0, 0
}

// Emitted returns the raw bytes of the events Next has returned since the last Feed, FeedView
// or Emitted call: their Raw fields back to back, as one slice of the input, valid as an
// Event's fields are. A relay that changes nothing writes it instead of each event.
func (p *Parser) Emitted() []byte {
	b := p.buf[p.mark:p.start]
	p.mark = p.start
	return b
}

// Close marks the end of the stream, so Next can return a final event that lacks its blank
// line (the SSE standard drops such an event; a relay must not).
func (p *Parser) Close() { p.eof = true }

// Buffered returns the number of bytes received but not yet returned in an event.
func (p *Parser) Buffered() int { return len(p.buf) - p.start }

// Next returns the next complete event, or false when more input (or Close) is needed.
func (p *Parser) Next() (Event, bool) {
	b := p.buf
	for p.scan < len(b) {
		i := indexEOL(b[p.scan:])
		if i < 0 {
			p.scan = len(b)
			break
		}
		j := p.scan + i
		next := j + 1
		if b[j] == '\r' {
			if j+1 == len(b) && !p.eof {
				p.scan = j // a "\n" may follow in the next chunk
				return Event{}, false
			}
			if j+1 < len(b) && b[j+1] == '\n' {
				next = j + 2
			}
		}
		blank := j == p.line
		p.line, p.scan = next, next
		if !blank {
			p.content = true
			continue
		}
		if p.content {
			return p.emit(next), true
		}
	}
	if p.eof && (p.content || p.line < len(b)) {
		return p.emit(len(b)), true
	}
	return Event{}, false
}

// emit returns the event b[p.start:end] and starts the next one at end.
func (p *Parser) emit(end int) Event {
	raw := p.buf[p.start:end]
	p.start, p.line, p.scan, p.content = end, end, end, false
	ev := Event{Raw: raw}
	ndata := 0
	for len(raw) > 0 {
		i := indexEOL(raw)
		line := raw
		if i >= 0 {
			line = raw[:i]
			if raw[i] == '\r' && i+1 < len(raw) && raw[i+1] == '\n' {
				i++
			}
			raw = raw[i+1:]
		} else {
			raw = nil
		}
		if len(line) == 0 || line[0] == ':' {
			continue
		}
		name, value := line, []byte(nil)
		if c := bytes.IndexByte(line, ':'); c >= 0 {
			name, value = line[:c], line[c+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		if value == nil {
			value = line[len(line):] // empty, non-nil
		}
		switch string(name) {
		case "data":
			switch ndata {
			case 0:
				ev.Data = value
			case 1:
				p.data = append(append(append(p.data[:0], ev.Data...), '\n'), value...)
				ev.Data, ev.joined = p.data, true
			default:
				p.data = append(append(p.data, '\n'), value...)
				ev.Data = p.data
			}
			ndata++
		case "event":
			ev.Name = value
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				ev.ID = value
			}
		}
	}
	return ev
}

// indexEOL returns the index of the first '\r' or '\n' in s, or -1, with two SIMD byte searches
// bounded by the line length (bytes.IndexAny walks byte by byte).
func indexEOL(s []byte) int {
	n := bytes.IndexByte(s, '\n')
	line := s
	if n >= 0 {
		line = s[:n]
	}
	if r := bytes.IndexByte(line, '\r'); r >= 0 {
		return r
	}
	return n
}

// AppendEvent appends one event to dst: an "event:" line when name is non-empty, one "data:"
// line per line of data (split at "\n"), and a blank line.
func AppendEvent(dst []byte, name string, data []byte) []byte {
	if name != "" {
		dst = append(dst, "event: "...)
		dst = append(dst, name...)
		dst = append(dst, '\n')
	}
	for {
		dst = append(dst, "data: "...)
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			dst = append(dst, data...)
			break
		}
		dst = append(dst, data[:i]...)
		dst = append(dst, '\n')
		data = data[i+1:]
	}
	return append(dst, '\n', '\n')
}

// Done is the end-of-stream event OpenAI and SGLang streams finish with.
var Done = []byte("data: [DONE]\n\n")
