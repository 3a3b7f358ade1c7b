package workloads

import (
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
	"weak"

	"github.com/pdrouter/pdrouter/router/wire"
)

// Source is a lazy stream of sessions. Next returns io.EOF after the last session (any other
// error is a trace read or parse error naming the file and line). Next and Close are safe for
// concurrent use; sessions are generated on demand, so memory is proportional to the sessions
// the caller holds, not to the workload size.
type Source interface {
	Next() (*Session, error)
	Close() error
}

// NewSource returns the source named by p.Workload after validating p. Trace sources open
// p.TraceFile; the caller must Close them.
func NewSource(p Params) (Source, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	switch p.Workload {
	case WorkloadMultiTurn:
		return newMultiTurn(p), nil
	case WorkloadGSP:
		return newGSP(p), nil
	case WorkloadLongSystemPrompt:
		return newLongSystemPrompt(p), nil
	case WorkloadRandom:
		return newRandom(p), nil
	case WorkloadShareGPT, WorkloadCustom:
		if p.DatasetPath != "" {
			return newDataset(p)
		}
		return newShareGPT(p), nil
	case WorkloadCachePressure:
		return newCachePressure(p), nil
	case WorkloadHotspot:
		return newHotspot(p), nil
	case WorkloadMooncake:
		r, err := OpenMooncake(p.TraceFile, p.Seed)
		if err != nil {
			return nil, err
		}
		r.TimeScale = p.TimeScale
		return &traceSource{next: r.session(p), close: r.Close}, nil
	case WorkloadAzure:
		r, err := OpenAzure(p.TraceFile, p.Seed)
		if err != nil {
			return nil, err
		}
		r.TimeScale = p.TimeScale
		return &traceSource{next: r.session(p), close: r.Close}, nil
	}
	return nil, fmt.Errorf("workloads: --workload %q is not implemented", p.Workload)
}

// genSource yields n sessions built by make(i), i = 0..n-1.
type genSource struct {
	mu   sync.Mutex // protects i
	i, n int
	make func(i int) *Session
}

func (g *genSource) Next() (*Session, error) {
	g.mu.Lock()
	i := g.i
	if i >= g.n {
		g.mu.Unlock()
		return nil, io.EOF
	}
	g.i++
	g.mu.Unlock()
	return g.make(i), nil
}

func (g *genSource) Close() error { return nil }

// traceSource adapts a trace reader.
type traceSource struct {
	mu    sync.Mutex // serializes next
	next  func() (*Session, error)
	close func() error
}

func (t *traceSource) Next() (*Session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.next()
}

func (t *traceSource) Close() error { return t.close() }

// shared is an immutable, already-encoded system prompt shared by every session of a group.
type shared struct {
	text   string // the system prompt
	enc    []byte // chat: the encoded system message; others: the escaped text
	tokens int    // tokens the piece adds to the rendered prompt

	idsOnce sync.Once
	ids     []uint32 // the piece's token ids as the prompt holds them (promptIDs)
}

// promptIDs returns the token ids the piece opens a prompt with (chat: the system message in
// the chat template), tokenized once for every session that shares the piece. Read-only.
func (s *shared) promptIDs(api API) []uint32 {
	s.idsOnce.Do(func() {
		if api == APIChat {
			s.ids = AppendTokens(nil, chatStart+"system\n"+s.text+chatEnd)
		} else {
			s.ids = AppendTokens(nil, s.text)
		}
	})
	return s.ids
}

// sharedCache hands out one *shared per key while any session holds it; the weak pointers let
// the garbage collector drop groups nobody uses, so memory follows the sessions in flight.
type sharedCache struct {
	mu sync.Mutex // protects m
	m  map[uint64]weak.Pointer[shared]
}

func (c *sharedCache) get(key uint64, build func() *shared) *shared {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[uint64]weak.Pointer[shared]{}
	}
	if s := c.m[key].Value(); s != nil {
		return s
	}
	s := build()
	c.m[key] = weak.Make(s)
	return s
}

// systemPiece encodes a system prompt of n tokens keyed by (dom, group) for api.
func systemPiece(p Params, dom, group uint64, n int) *shared {
	text := genText(p.Seed, dom, group, 0, n)
	if p.API == APIChat {
		b := append([]byte(`{"role":"system","content":`), wire.AppendJSONString(nil, text)...)
		return &shared{text: text, enc: append(b, '}'), tokens: messageOverhead("system") + n}
	}
	return &shared{text: text, enc: wire.AppendJSONStringBody(nil, text), tokens: n}
}

// lengthRand returns the generator of lengths for (session, turn).
func lengthRand(seed, a, b uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, mix(domLength, a, b)))
}

// singleTurn returns a script of one question of qTokens tokens and out output tokens.
func singleTurn(q string, qTokens, out int) func(int) (string, int, int, time.Duration) {
	return func(int) (string, int, int, time.Duration) { return q, qTokens, out, 0 }
}

// newMultiTurn: --conversations conversations of --turns turns; conversation i opens with
// system prompt i mod --shared-system-prompts; each turn adds a question of --question-len
// tokens and asks for --output-len tokens (both scaled by --range-ratio), after --think-time.
func newMultiTurn(p Params) Source {
	cache := &sharedCache{}
	return &genSource{n: p.Conversations, make: func(i int) *Session {
		var sys *shared
		if p.SystemPromptLen > 0 {
			g := uint64(i % p.SharedSystemPrompts)
			sys = cache.get(g, func() *shared { return systemPiece(p, domSystem, g, p.SystemPromptLen) })
		}
		s := newSession("multiturn-"+strconv.Itoa(i), p.form(), sys, p.Turns,
			func(k int) (string, int, int, time.Duration) {
				r := lengthRand(p.Seed, uint64(i), uint64(k))
				qn := sampleLen(r, p.QuestionLen, p.RangeRatio)
				out := sampleLen(r, p.OutputLen, p.RangeRatio)
				return genText(p.Seed, domQuestion, uint64(i), uint64(k), qn), qn, out, p.ThinkTime
			})
		s.reserve(p.Turns * (p.QuestionLen + p.OutputLen))
		return s
	}}
}

// newGSP: sglang's generated-shared-prefix. --gsp-num-groups groups × --gsp-prompts-per-group
// single-turn sessions; a session is its group's system prompt (--gsp-system-prompt-len) plus its
// own question (--gsp-question-len), asking --gsp-output-len tokens. Groups share their system
// prompt and nothing else. Shuffled (seeded) unless --gsp-ordered.
func newGSP(p Params) Source {
	total := p.GSPNumGroups * p.GSPPromptsPerGroup
	var perm []int32
	if !p.GSPOrdered {
		perm = make([]int32, total)
		for i := range perm {
			perm[i] = int32(i)
		}
		r := rand.New(rand.NewPCG(p.Seed, mix(domShuffle)))
		r.Shuffle(total, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	}
	cache := &sharedCache{}
	return &genSource{n: total, make: func(i int) *Session {
		idx := i
		if perm != nil {
			idx = int(perm[i])
		}
		g, j := idx/p.GSPPromptsPerGroup, idx%p.GSPPromptsPerGroup
		sys := cache.get(uint64(g), func() *shared {
			return systemPiece(p, domGSPSystem, uint64(g), p.GSPSystemPromptLen)
		})
		q := genText(p.Seed, domGSPQuestion, uint64(g), uint64(j), p.GSPQuestionLen)
		return newSession(fmt.Sprintf("gsp-%d-%d", g, j), p.form(), sys, 1,
			singleTurn(q, p.GSPQuestionLen, p.GSPOutputLen))
	}}
}

// newLongSystemPrompt: --lsp-prompts single-turn sessions that all open with the same system
// prompt of --lsp-system-prompt-len tokens, then a short question (--lsp-question-len), asking
// --lsp-output-len tokens: the cache-aware hot-spot case.
func newLongSystemPrompt(p Params) Source {
	cache := &sharedCache{}
	return &genSource{n: p.LSPPrompts, make: func(i int) *Session {
		sys := cache.get(0, func() *shared { return systemPiece(p, domLSP, 0, p.LSPSystemPromptLen) })
		q := genText(p.Seed, domLSP, 1, uint64(i), p.LSPQuestionLen)
		return newSession("lsp-"+strconv.Itoa(i), p.form(), sys, 1,
			singleTurn(q, p.LSPQuestionLen, p.LSPOutputLen))
	}}
}

// RandomLengths returns the prompt and output lengths of request i of p's random workload
// (deterministic in p.Seed, p.InputLen, p.OutputLen and p.RangeRatio).
func RandomLengths(p Params, i int) (prompt, output int) {
	r := lengthRand(p.Seed, uint64(i), 1<<32)
	prompt = sampleLen(r, p.InputLen, p.RangeRatio)
	return prompt, sampleLen(r, p.OutputLen, p.RangeRatio)
}

// newRandom: --num-prompts single-turn sessions of random text, --input-len prompt tokens and
// --output-len output tokens, both scaled by --range-ratio (sglang's random dataset); no system
// prompt.
func newRandom(p Params) Source {
	return &genSource{n: p.NumPrompts, make: func(i int) *Session {
		in, out := RandomLengths(p, i)
		q := genText(p.Seed, domRandom, uint64(i), 0, in)
		return newSession("random-"+strconv.Itoa(i), p.form(), nil, 1, singleTurn(q, in, out))
	}}
}
