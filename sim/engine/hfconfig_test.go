package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every built-in card comes back from its model's config.json (testdata/hfconfig: the fields
// the roofline reads, as the Hugging Face repositories publish them): the shapes exactly, the
// parameter counts within the rounding of the model cards' published totals, and — the two
// known differences set aside — the built server within 2 % of the built-in card's on the
// same GPU and parallelism.
func TestModelFromHFConfigMatchesTheCards(t *testing.T) {
	for _, tc := range []struct {
		card ModelCard
		gpu  GPU
		par  Parallelism
	}{
		{Llama3Dense8B, H100SXM, Parallelism{TP: 1}},
		{Llama3Dense70B, H100SXM, Parallelism{TP: 4}},
		{Qwen25Dense7B, A100SXM, Parallelism{TP: 1}},
		{Qwen25Dense7BGPTQ, A10, Parallelism{TP: 4}},
		{Qwen3MoE30BA3B, H200SXM, Parallelism{TP: 8, DP: 8, EP: 8, DPAttention: true}},
		{DeepSeekV3, H200SXM, Parallelism{TP: 8, DP: 8, EP: 8, DPAttention: true}},
		{KimiK2, H200SXM, Parallelism{TP: 32, DP: 32, EP: 32, DPAttention: true}},
		{GPTOSS120B, B200, Parallelism{TP: 4, DP: 4, EP: 4, DPAttention: true}},
	} {
		t.Run(tc.card.Name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "hfconfig", tc.card.Name+".json"))
			require.NoError(t, err)
			got, err := ModelFromHFConfig(tc.card.Name, data)
			require.NoError(t, err)
			want := tc.card
			for _, f := range []struct {
				name      string
				got, want int
			}{{"Hidden", got.Hidden, want.Hidden}, {"Layers", got.Layers, want.Layers}, {"MoELayers", got.MoELayers, want.MoELayers},
				{"Experts", got.Experts, want.Experts}, {"TopK", got.TopK, want.TopK}, {"Heads", got.Heads, want.Heads},
				{"KVHeads", got.KVHeads, want.KVHeads}, {"HeadDim", got.HeadDim, want.HeadDim},
				{"SlidingLayers", got.SlidingLayers, want.SlidingLayers}, {"SlidingWindow", got.SlidingWindow, want.SlidingWindow}} {
				assert.Equal(t, f.want, f.got, f.name)
			}
			assert.Equal(t, want.Vocab, got.Vocab)
			assert.Equal(t, want.Architecture, got.Architecture)
			assert.Equal(t, want.AttnFLOPsPerPair, got.AttnFLOPsPerPair)
			assert.Equal(t, want.PrefillAttnFLOPsPerPair, got.PrefillAttnFLOPsPerPair)
			assert.Equal(t, want.GEMM, got.GEMM)
			assert.Equal(t, want.expertGEMM(), got.expertGEMM())
			assert.Equal(t, want.kvDType(), got.kvDType())
			assert.InEpsilon(t, want.expertBytes(), got.expertBytes(), 0.02, "expert bytes")
			assert.InEpsilon(t, want.DTypeBytes, got.DTypeBytes, 0.02, "DTypeBytes")
			assert.InEpsilon(t, want.Params, got.Params, 0.01, "Params")
			assert.InEpsilon(t, want.AttnParams, got.AttnParams, 0.01, "AttnParams")
			if want.RoutedParams > 0 {
				assert.InEpsilon(t, want.RoutedParams, got.RoutedParams, 0.01, "RoutedParams")
			}
			if want.Name == GPTOSS120B.Name {
				// OpenAI's published 5.1 B active leaves out the input embedding table (201,088 ×
				// 2,880); config.json's count keeps it, as every other card's does.
				assert.InDelta(t, 201088*2880, got.ActiveParams-want.ActiveParams, 0.05e9, "gpt-oss active beyond the card (rounded to 0.1 B)")
				got.ActiveParams = want.ActiveParams
			} else {
				assert.InEpsilon(t, want.ActiveParams, got.ActiveParams, 0.03, "ActiveParams (the cards round to 0.1 B)")
			}
			if want.Name == KimiK2.Name {
				// The card's 1.03 T is rounded: 3.8 B more than config.json's shapes, all of it in
				// the weights every step reads, which is 6 % of a batch-1 step at this size.
				assert.InDelta(t, 3.8e9, want.Params-got.Params, 0.3e9, "kimi-k2 card rounding")
				got.Params = want.Params
			}

			pw, err := Build("", want, tc.gpu, tc.par)
			require.NoError(t, err)
			pg, err := Build("", got, tc.gpu, tc.par)
			require.NoError(t, err)
			for _, b := range []int{1, 64, 256} {
				assert.InEpsilon(t, float64(pw.ITLAt(b)), float64(pg.ITLAt(b)), 0.02, "ITL at batch %d", b)
			}
			assert.InEpsilon(t, pw.PrefillTokensPerSecond(), pg.PrefillTokensPerSecond(), 0.02, "prefill tok/s")
			assert.InEpsilon(t, float64(pw.MaxTotalTokens), float64(pg.MaxTotalTokens), 0.02, "KV tokens")
		})
	}
}

// The name is the one given, else the config's _name_or_path; a config without one must be
// named.
func TestModelFromHFConfigName(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "hfconfig", "llama3-8b.json"))
	require.NoError(t, err)
	m, err := ModelFromHFConfig("", data)
	require.NoError(t, err)
	assert.Equal(t, "meta-llama/Llama-3.1-8B-Instruct", m.Name)
	_, err = ModelFromHFConfig("", []byte(`{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 128}`))
	assert.ErrorContains(t, err, "name the model (--model-path)")
}

// What the parser cannot model it refuses, naming the config.json key at fault.
func TestModelFromHFConfigErrorsNameTheKey(t *testing.T) {
	base := `"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 128`
	for _, tc := range []struct{ json, want string }{
		{`{`, "config.json"},
		{`{"hidden_size": 64}`, "num_hidden_layers 0 must be > 0"},
		{`{` + base + `, "num_key_value_heads": 3}`, "num_key_value_heads 3 must divide num_attention_heads 4"},
		{`{"hidden_size": 66, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 128}`, "give head_dim"},
		{`{` + base + `, "num_experts": 8}`, "num_experts_per_tok 0 must be in [1, 8]"},
		{`{` + base + `, "torch_dtype": "int8"}`, `torch_dtype "int8"`},
		{`{` + base + `, "quantization_config": {"quant_method": "bitsandbytes"}}`, `quant_method "bitsandbytes" is not modelled`},
		{`{` + base + `, "quantization_config": {"quant_method": "gptq", "bits": 0}}`, "quantization_config.bits 0"},
		{`{` + base + `, "kv_lora_rank": 512}`, "kv_lora_rank 512 needs qk_nope_head_dim"},
		{`{` + base + `, "layer_types": ["sliding_attention", "full_attention"]}`, "no sliding_window"},
		{`{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10}`, "intermediate_size 0 must be > 0"},
	} {
		_, err := ModelFromHFConfig("m", []byte(tc.json))
		if assert.Error(t, err, tc.json) {
			assert.Contains(t, err.Error(), tc.want, tc.json)
		}
	}
}
