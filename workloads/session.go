package workloads

import (
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/pdrouter/pdrouter/router/wire"
)

// Turn is one request of a session, ready to send.
type Turn struct {
	Session     string        // the session's ID
	Index       int           // 0-based turn number within the session
	API         API           // the request form
	Path        string        // HTTP path for API, e.g. "/v1/chat/completions"
	Body        []byte        // JSON request body; owned by the caller
	InputTokens int           // tokens of RenderPrompt(API, Body)
	MaxTokens   int           // max_tokens / max_new_tokens requested (the output length)
	ThinkTime   time.Duration // wait after the previous reply before sending (0 for turn 0)
	PromptIDs   []uint32      // the prompt's token ids if the session tracks them, else nil
	// RouteText is the router's routing text of Body (wire.Body.Text: chat contents joined by
	// spaces, the prompt otherwise) and Model its "model" ("" for generate), when the session
	// tracks them (ForSimulator); "" otherwise.
	RouteText string
	Model     string
	// RouteRunes is len(RouteText) in runes, when RouteText is set.
	RouteRunes int
}

// Session is one conversation: a fixed number of turns whose prompts grow by the previous
// reply and a new question. Arrival is the session's offset from the start of the run for
// trace rows (scaled by --time-scale); generators leave it 0 and HasArrival false.
// A Session is not safe for concurrent use; its turns are sequential by nature.
type Session struct {
	ID         string
	Arrival    time.Duration
	HasArrival bool

	req    requestForm
	sys    *shared // the opening system piece (shared within a group), or nil
	turns  int
	next   int
	script func(k int) (question string, questionTokens, maxTokens int, think time.Duration)

	hist   []byte // after sys: chat: encoded messages, comma-led; others: escaped prompt text
	tokens int    // tokens of the history incl. sys (chat: without the generation prompt)

	trackIDs bool
	ids      []uint32 // token ids of the history incl. sys, when trackIDs

	pieces    int    // pieces appended after sys
	trackText bool   // maintain text, the routing text (ForSimulator)
	noBody    bool   // do not render Turn.Body (ForSimulator)
	text      []byte // the routing text of the history incl. sys, when trackText
	runes     int    // len(text) in runes
	grow      int    // tokens the conversation is expected to add to its history (reserve)
}

// charsPerToken sizes the routing text for a number of tokens: generated text averages about
// 4.5 bytes a token, so a reservation this generous is rarely outgrown.
const charsPerToken = 5

// ForSimulator prepares the session for a simulator, which never sends bodies: every later
// Turn carries PromptIDs (TrackPromptIDs), RouteText and Model, each maintained incrementally
// (a turn costs its new pieces, not its whole history), and no Body. Running the same session
// without ForSimulator gives the bodies a bench sends, whose parse (wire.Parse) yields the same
// RouteText and Model and whose tokenization (PromptIDs) the same ids. Call it before the
// first Next.
func (s *Session) ForSimulator() {
	s.TrackPromptIDs()
	if s.trackText {
		return
	}
	s.trackText, s.noBody = true, true
	sys := 0
	if s.sys != nil {
		sys = len(s.sys.text)
	}
	s.text = make([]byte, 0, sys+s.grow*charsPerToken+2*s.turns)
	if s.sys != nil {
		s.text = append(s.text, s.sys.text...)
		s.runes = utf8.RuneCountInString(s.sys.text)
	}
}

// addText appends one piece to the routing text: chat joins non-empty contents with a space
// (wire's addPiece), the other forms are the prompt itself, pieces joined by "\n".
func (s *Session) addText(text string) {
	if s.req.api == APIChat {
		if text == "" {
			return
		}
		if len(s.text) > 0 {
			s.text = append(s.text, ' ')
			s.runes++
		}
		s.text = append(s.text, text...)
		s.runes += utf8.RuneCountInString(text)
		return
	}
	if s.pieces > 0 || s.sys != nil {
		s.text = append(s.text, '\n')
		s.runes++
	}
	s.text = append(s.text, text...)
	s.runes += utf8.RuneCountInString(text)
}

// TrackPromptIDs makes every later Turn carry PromptIDs, maintained incrementally (only the new
// pieces are tokenized), so a simulator need not re-tokenize each turn's whole prompt; they equal
// PromptIDs(turn.API, turn.Body). Call it before the first Next: later calls panic.
func (s *Session) TrackPromptIDs() {
	if s.next > 0 {
		panic("workloads: TrackPromptIDs after the session's first turn")
	}
	if s.trackIDs {
		return
	}
	s.trackIDs = true
	var sys []uint32
	if s.sys != nil {
		sys = s.sys.promptIDs(s.req.api)
	}
	// Room for the whole conversation: its pieces, each message's template ids, the chat
	// generation prompt.
	s.ids = append(make([]uint32, 0, len(sys)+s.grow+(2*s.turns+1)*8), sys...)
}

// requestForm holds the per-request fields every body carries.
type requestForm struct {
	api       API
	model     string
	ignoreEOS bool
}

// newSession builds a session of turns turns. sys (may be nil) opens the conversation;
// script gives turn k's question, its token count, the output length and the think time.
func newSession(id string, req requestForm, sys *shared, turns int,
	script func(k int) (string, int, int, time.Duration)) *Session {
	s := &Session{ID: id, req: req, sys: sys, turns: turns, script: script}
	if sys != nil {
		s.tokens = sys.tokens
	}
	return s
}

// Turns returns the number of turns of the session.
func (s *Session) Turns() int { return s.turns }

// Next returns the next turn, or false once all turns were returned. prevReply is the reply to
// the previous turn (ignored for turn 0): the bench passes the text it received, the simulator
// ReplyText(prompt ids, MaxTokens). For chat it is appended as an assistant message; for
// completions and generate it is appended to the prompt text after a "\n".
func (s *Session) Next(prevReply string) (Turn, bool) {
	return s.next1(prevReply, nil)
}

// NextReply is Next with the reply's token ids (Tokenize(prevReply), e.g. from AppendReply),
// which spares tokenizing it again. Both are copied, not kept: the caller may reuse them.
func (s *Session) NextReply(prevReply []byte, replyIDs []uint32) (Turn, bool) {
	// The session copies the reply (into its text, ids and history) and keeps no reference to
	// it: a view of the bytes, not a copy, is enough.
	text := unsafe.String(unsafe.SliceData(prevReply), len(prevReply))
	if replyIDs == nil && text != "" {
		return s.next1(text, nil)
	}
	return s.next1(text, replyIDs)
}

func (s *Session) next1(prevReply string, replyIDs []uint32) (Turn, bool) {
	if s.next >= s.turns {
		return Turn{}, false
	}
	k := s.next
	s.next++
	if k > 0 {
		n := len(replyIDs)
		if replyIDs == nil {
			n = Count(prevReply)
		}
		s.appendPieceIDs("assistant", prevReply, n, replyIDs)
	}
	q, qTokens, maxTokens, think := s.script(k)
	s.appendPiece("user", q, qTokens)
	if k == 0 {
		think = 0
	}
	t := Turn{Session: s.ID, Index: k, API: s.req.api, Path: s.req.api.Path(),
		MaxTokens: maxTokens, ThinkTime: think, InputTokens: s.tokens}
	if s.req.api == APIChat {
		t.InputTokens += genPromptTokens
	}
	if !s.noBody {
		t.Body = s.body(maxTokens)
	}
	if s.trackText {
		// s.text only ever grows by appending, so its first len bytes never change: the
		// turn's routing text aliases them instead of copying the whole history each turn.
		t.RouteText = unsafe.String(unsafe.SliceData(s.text), len(s.text))
		t.RouteRunes = s.runes
		if s.req.api != APIGenerate {
			t.Model = s.req.model
		}
	}
	if s.trackIDs {
		// s.ids only grows by appending, so the turn's ids alias its first elements rather than
		// copying the whole history each turn (the copy was a sixth of a 100k-request
		// simulation's allocations). A chat turn ends with the generation prompt, which is
		// written past the history's end and then dropped from it: the next piece is the
		// assistant's, whose header writes the very same ids there again (chatGenPrompt is
		// chatStart+"assistant\n"), so the turn's view never changes.
		if s.req.api == APIChat {
			s.ids = AppendTokens(s.ids, chatGenPrompt)
			t.PromptIDs = s.ids[:len(s.ids):len(s.ids)]
			s.ids = s.ids[:len(s.ids)-genPromptTokens]
		} else {
			t.PromptIDs = s.ids[:len(s.ids):len(s.ids)]
		}
	}
	return t, true
}

// reserve says the conversation will add about tokens tokens of generated text to its
// history: the history (or, ForSimulator, the routing text and token ids) is sized for them
// when first written, sparing the reallocations of a growing conversation.
func (s *Session) reserve(tokens int) { s.grow = tokens }

// reserveHist sizes the JSON history for the tokens reserve announced, before its first piece.
func (s *Session) reserveHist() {
	if s.hist == nil && s.grow > 0 {
		s.hist = make([]byte, 0, s.grow*charsPerToken+64*s.turns)
	}
}

// appendPiece adds one piece of content to the history.
func (s *Session) appendPiece(role, text string, tokens int) {
	s.appendPieceIDs(role, text, tokens, nil)
}

// appendPieceIDs is appendPiece with text's token ids when the caller has them (nil:
// tokenize). Without a body to render (ForSimulator) the JSON history is not kept.
func (s *Session) appendPieceIDs(role, text string, tokens int, ids []uint32) {
	if s.trackText {
		s.addText(text)
	}
	nonEmpty := s.pieces > 0 || s.sys != nil
	s.pieces++
	appendText := func() {
		if ids != nil {
			s.ids = append(s.ids, ids...)
		} else {
			s.ids = AppendTokens(s.ids, text)
		}
	}
	if s.req.api == APIChat {
		if !s.noBody {
			s.reserveHist()
			if nonEmpty {
				s.hist = append(s.hist, ',')
			}
			s.hist = append(s.hist, `{"role":"`...)
			s.hist = append(s.hist, role...)
			s.hist = append(s.hist, `","content":`...)
			s.hist = wire.AppendJSONString(s.hist, text)
			s.hist = append(s.hist, '}')
		}
		s.tokens += messageOverhead(role) + tokens
		if s.trackIDs { // exact: content sits between the template's "\n" and "<"
			s.ids = AppendTokens(s.ids, chatStart+role+"\n")
			appendText()
			s.ids = AppendTokens(s.ids, chatEnd)
		}
		return
	}
	if nonEmpty {
		if !s.noBody {
			s.hist = append(s.hist, `\n`...)
		}
		s.tokens += newlineTokens
		if s.trackIDs {
			s.ids = AppendTokens(s.ids, "\n")
		}
	}
	if s.trackIDs { // exact: "\n" always ends a token
		appendText()
	}
	if !s.noBody {
		s.reserveHist()
		s.hist = wire.AppendJSONStringBody(s.hist, text)
	}
	s.tokens += tokens
}

// body renders the request body for the current history.
func (s *Session) body(maxTokens int) []byte {
	var sys []byte
	if s.sys != nil {
		sys = s.sys.enc
	}
	b := make([]byte, 0, len(sys)+len(s.hist)+2*len(s.req.model)+160)
	switch s.req.api {
	case APIChat:
		b = append(b, `{"model":`...)
		b = wire.AppendJSONString(b, s.req.model)
		b = append(b, `,"messages":[`...)
		b = append(b, sys...)
		b = append(b, s.hist...)
		b = append(b, `],"max_tokens":`...)
		b = strconv.AppendInt(b, int64(maxTokens), 10)
		b = s.openAITail(b)
	case APICompletions:
		b = append(b, `{"model":`...)
		b = wire.AppendJSONString(b, s.req.model)
		b = append(b, `,"prompt":"`...)
		b = append(b, sys...)
		b = append(b, s.hist...)
		b = append(b, `","max_tokens":`...)
		b = strconv.AppendInt(b, int64(maxTokens), 10)
		b = s.openAITail(b)
	default: // generate: SGLang's native form has no model field
		b = append(b, `{"text":"`...)
		b = append(b, sys...)
		b = append(b, s.hist...)
		b = append(b, `","sampling_params":{"max_new_tokens":`...)
		b = strconv.AppendInt(b, int64(maxTokens), 10)
		if s.req.ignoreEOS {
			b = append(b, `,"ignore_eos":true`...)
		}
		b = append(b, `},"stream":true}`...)
	}
	return b
}

func (s *Session) openAITail(b []byte) []byte {
	if s.req.ignoreEOS {
		b = append(b, `,"ignore_eos":true`...)
	}
	return append(b, `,"stream":true,"stream_options":{"include_usage":true}}`...)
}
