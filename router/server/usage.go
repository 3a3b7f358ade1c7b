package server

import (
	"bytes"
	"encoding/json"
)

// cachedRatio extracts cached_tokens/prompt_tokens from a worker's reply object: OpenAI usage
// (usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens) or SGLang meta_info
// (meta_info.prompt_tokens, meta_info.cached_tokens). ok is false when the object has neither.
func cachedRatio(obj []byte) (ratio float64, ok bool) {
	if !bytes.Contains(obj, []byte(`"cached_tokens"`)) {
		return 0, false
	}
	var v struct {
		Usage *struct {
			PromptTokens  int `json:"prompt_tokens"`
			PromptDetails *struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
		MetaInfo *struct {
			PromptTokens int `json:"prompt_tokens"`
			CachedTokens int `json:"cached_tokens"`
		} `json:"meta_info"`
	}
	if json.Unmarshal(obj, &v) != nil {
		return 0, false
	}
	switch {
	case v.Usage != nil && v.Usage.PromptDetails != nil && v.Usage.PromptTokens > 0:
		return float64(v.Usage.PromptDetails.CachedTokens) / float64(v.Usage.PromptTokens), true
	case v.MetaInfo != nil && v.MetaInfo.PromptTokens > 0:
		return float64(v.MetaInfo.CachedTokens) / float64(v.MetaInfo.PromptTokens), true
	}
	return 0, false
}

// observeCached records the worker-reported cache hit of a non-streamed reply.
func (s *Server) observeCached(body []byte) {
	if r, ok := cachedRatio(body); ok {
		s.metrics.WorkerCachedRatio.Observe(r)
	}
}
