package fakeworker

import (
	"fmt"

	"github.com/pdrouter/pdrouter/router/tokenize"
	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/workloads"
)

// loadTokenizer loads --tokenizer-path (and --chat-template); nil without a path.
func loadTokenizer(path, chatTemplate string) (*tokenize.Tokenizer, error) {
	if path == "" {
		return nil, nil
	}
	t, err := tokenize.Load(path, chatTemplate)
	if err != nil {
		return nil, fmt.Errorf("fakeworker: --tokenizer-path %s: %w", path, err)
	}
	return t, nil
}

// promptIDs returns the prompt token ids of an inference body: with --tokenizer-path as an
// SGLang worker derives them (tokenize.PromptIDs, the function serve's KV-event routing calls
// too), otherwise through the approximate workloads tokenizer (workloads.PromptIDs).
func (w *Worker) promptIDs(route wire.Route, raw []byte) ([]uint32, error) {
	if w.tok == nil {
		return workloads.PromptIDs(apiOf(route), raw)
	}
	ids, err := w.tok.PromptIDs(nil, tokenizeAPI(route), raw)
	if err != nil {
		return nil, fmt.Errorf("fakeworker: %s body: %w", route, err)
	}
	return ids, nil
}

// tokenizeAPI maps a route to the body format tokenize reads.
func tokenizeAPI(r wire.Route) tokenize.API {
	switch r {
	case wire.Chat:
		return tokenize.Chat
	case wire.Completions:
		return tokenize.Completions
	}
	return tokenize.Generate
}

// replyIDs are the token ids of a reply text, by the tokenizer the prompts use (so a finished
// request's cached outputs match the next turn's prompt).
func (w *Worker) replyIDs(text string) []uint32 {
	if w.tok == nil {
		return workloads.Tokenize(text)
	}
	return w.tok.Encode(nil, text, false)
}
