package wire

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ev is an owned copy of an Event, for comparisons.
type ev struct {
	Raw, Data, Name, ID string
	HasData             bool
}

func own(e Event) ev {
	return ev{string(e.Raw), string(e.Data), string(e.Name), string(e.ID), e.HasData()}
}

// feedAll parses stream fed in the given chunks and returns every event, Close included.
func feedAll(chunks ...[]byte) []ev {
	var p Parser
	var out []ev
	for _, c := range chunks {
		p.Feed(c)
		for e, ok := p.Next(); ok; e, ok = p.Next() {
			out = append(out, own(e))
		}
	}
	p.Close()
	for e, ok := p.Next(); ok; e, ok = p.Next() {
		out = append(out, own(e))
	}
	return out
}

// feedViewAll parses stream as a relay does: each chunk copied into one reused read buffer,
// fed in place (FeedView), its events taken, Emitted collected, then Retain before the buffer
// is reused. It returns the events (Close included) and what Emitted returned, joined.
func feedViewAll(chunks ...[]byte) ([]ev, string) {
	var p Parser
	var out []ev
	var emitted strings.Builder
	buf := make([]byte, 0, 64)
	for _, c := range chunks {
		buf = append(buf[:0], c...)
		p.FeedView(buf)
		for e, ok := p.Next(); ok; e, ok = p.Next() {
			out = append(out, own(e))
		}
		emitted.Write(p.Emitted())
		p.Retain()
		for i := range buf {
			buf[i] = 'X' // the relay's next read overwrites the buffer
		}
	}
	p.Close()
	for e, ok := p.Next(); ok; e, ok = p.Next() {
		out = append(out, own(e))
	}
	emitted.Write(p.Emitted())
	return out, emitted.String()
}

func TestParserFeedViewPassesReadsThrough(t *testing.T) {
	t.Parallel()
	stream := "data: a\n\ndata: b\n\n: ping\n\ndata: {\"x\":\r\ndata: 1}\r\n\r\ndata: [DONE]\n\n"
	want := feedAll([]byte(stream))
	for _, cut := range []int{1, 2, 3, 7, 9, 18, len(stream)} {
		var chunks [][]byte
		for rest := []byte(stream); len(rest) > 0; {
			n := min(cut, len(rest))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		got, emitted := feedViewAll(chunks...)
		assert.Equal(t, want, got, "cut %d", cut)
		assert.Equal(t, stream, emitted, "cut %d", cut)
	}
	// A whole read of complete events is parsed where it lies: nothing is copied.
	var p Parser
	p.FeedView([]byte(stream))
	for _, ok := p.Next(); ok; _, ok = p.Next() {
	}
	assert.Equal(t, stream, string(p.Emitted()))
	p.Retain()
	assert.Zero(t, cap(p.own), "the parser owns no copy")
	// The joined data of a multi-line event is flagged: it is not a slice of Raw.
	events, _ := feedViewAll([]byte("data: a\ndata: b\n\ndata: c\n\n"))
	require.Len(t, events, 2)
	var q Parser
	q.Feed([]byte("data: a\ndata: b\n\ndata: c\n\n"))
	e1, _ := q.Next()
	assert.True(t, e1.Joined())
	e2, _ := q.Next()
	assert.False(t, e2.Joined())
}

func bytewise(s []byte) [][]byte {
	out := make([][]byte, len(s))
	for i := range s {
		out[i] = s[i : i+1]
	}
	return out
}

func TestParserEvents(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		stream string
		want   []ev
	}{
		{"lf", "data: a\n\ndata: [DONE]\n\n", []ev{
			{Raw: "data: a\n\n", Data: "a", HasData: true},
			{Raw: "data: [DONE]\n\n", Data: "[DONE]", HasData: true},
		}},
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []ev{
			{Raw: "data: a\r\n\r\n", Data: "a", HasData: true},
			{Raw: "data: b\r\n\r\n", Data: "b", HasData: true},
		}},
		{"cr only", "data: a\r\rdata: b\r\r", []ev{
			{Raw: "data: a\r\r", Data: "a", HasData: true},
			{Raw: "data: b\r\r", Data: "b", HasData: true},
		}},
		{"multi-line data and fields", "event: msg\nid: 7\ndata: line1\ndata:line2\ndata:  two spaces\nretry: 5\n\n", []ev{
			{Raw: "event: msg\nid: 7\ndata: line1\ndata:line2\ndata:  two spaces\nretry: 5\n\n", Data: "line1\nline2\n two spaces", Name: "msg", ID: "7", HasData: true},
		}},
		{"comment only is an event without data", ": keep-alive\n\ndata: x\n\n", []ev{
			{Raw: ": keep-alive\n\n"},
			{Raw: "data: x\n\n", Data: "x", HasData: true},
		}},
		{"leading blank lines belong to the next event", "\n\r\ndata: x\n\n\n", []ev{
			{Raw: "\n\r\ndata: x\n\n", Data: "x", HasData: true},
		}},
		{"empty data field", "data\n\ndata:\n\n", []ev{
			{Raw: "data\n\n", HasData: true},
			{Raw: "data:\n\n", HasData: true},
		}},
		{"unterminated last event", "data: a\n\ndata: {\"x\":1}", []ev{
			{Raw: "data: a\n\n", Data: "a", HasData: true},
			{Raw: "data: {\"x\":1}", Data: `{"x":1}`, HasData: true},
		}},
		{"unterminated last line", "data: a\ndata: b\n", []ev{
			{Raw: "data: a\ndata: b\n", Data: "a\nb", HasData: true},
		}},
		{"trailing cr at eof", "data: a\r", []ev{
			{Raw: "data: a\r", Data: "a", HasData: true},
		}},
		{"field without colon", "event\ndata: d\n\n", []ev{
			{Raw: "event\ndata: d\n\n", Data: "d", HasData: true},
		}},
		{"id with NUL ignored", "id: a\x00b\ndata: d\n\n", []ev{
			{Raw: "id: a\x00b\ndata: d\n\n", Data: "d", HasData: true},
		}},
		{"nothing", "", nil},
		{"blank lines only", "\n\n\r\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := []byte(tc.stream)
			got := feedAll(s)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, got, feedAll(bytewise(s)...), "byte-by-byte")
			for i := 0; i <= len(s); i++ {
				require.Equal(t, got, feedAll(s[:i], s[i:]), "split at %d", i)
			}
		})
	}
}

func TestParserDoesNotWaitForMore(t *testing.T) {
	t.Parallel()
	var p Parser
	p.Feed([]byte("data: a\n\nda"))
	e, ok := p.Next()
	require.True(t, ok, "a complete event is returned before the next one arrives")
	assert.Equal(t, "a", string(e.Data))
	_, ok = p.Next()
	assert.False(t, ok)
	assert.Equal(t, 2, p.Buffered())
	// The one case that waits: a trailing "\r" may be the first half of "\r\n".
	p.Feed([]byte("ta: b\r\n\r"))
	_, ok = p.Next()
	assert.False(t, ok)
	p.Feed([]byte("\n"))
	e, ok = p.Next()
	require.True(t, ok)
	assert.Equal(t, "data: b\r\n\r\n", string(e.Raw))
	assert.Equal(t, 0, p.Buffered())
}

func TestParserLongStreamCompacts(t *testing.T) {
	t.Parallel()
	var p Parser
	var want bytes.Buffer
	var got []byte
	for i := range 5000 {
		chunk := "data: {\"i\":" + strings.Repeat("7", i%50) + "}\n\n"
		want.WriteString(chunk)
		p.Feed([]byte(chunk))
		for e, ok := p.Next(); ok; e, ok = p.Next() {
			got = append(got, e.Raw...)
		}
	}
	assert.Equal(t, want.String(), string(got))
	assert.Less(t, cap(p.buf), 4096, "consumed bytes are dropped")
}

func TestAppendEvent(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "data: x\n\n", string(AppendEvent(nil, "", []byte("x"))))
	assert.Equal(t, "event: e\ndata: a\ndata: \ndata: b\n\n", string(AppendEvent(nil, "e", []byte("a\n\nb"))))
	assert.Equal(t, "data: \n\n", string(AppendEvent(nil, "", nil)))
	got := feedAll(AppendEvent(nil, "e", []byte("a\n\nb")))
	require.Len(t, got, 1)
	assert.Equal(t, "a\n\nb", got[0].Data, "round trip")
	assert.True(t, IsDone([]byte(" [DONE] ")))
	assert.False(t, IsDone([]byte("[DONE]x")))
	d := feedAll(Done)
	require.Len(t, d, 1)
	e := Event{Data: []byte(d[0].Data)}
	assert.True(t, e.IsDone())
}
