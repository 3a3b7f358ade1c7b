package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// hfConfig is the part of a Hugging Face config.json the roofline reads. Field names are the
// transformers library's; the families differ in which they set:
//   - dense GQA (LlamaForCausalLM, Qwen2/Qwen3ForCausalLM, MistralForCausalLM): hidden_size,
//     intermediate_size, num_attention_heads, num_key_value_heads, head_dim (optional);
//   - MoE (Qwen2Moe/Qwen3MoeForCausalLM, MixtralForCausalLM, GptOssForCausalLM): num_experts
//     or num_local_experts, num_experts_per_tok (or experts_per_token), moe_intermediate_size
//     (Mixtral and gpt-oss: intermediate_size), shared_expert_intermediate_size,
//     decoder_sparse_step, mlp_only_layers;
//   - MLA (DeepseekV2/V3ForCausalLM, Kimi K2): q_lora_rank, kv_lora_rank, qk_nope_head_dim,
//     qk_rope_head_dim, v_head_dim, n_routed_experts, n_shared_experts, first_k_dense_replace.
type hfConfig struct {
	Architectures     []string `json:"architectures"`
	NameOrPath        string   `json:"_name_or_path"`
	Hidden            int      `json:"hidden_size"`
	Intermediate      int      `json:"intermediate_size"`
	Layers            int      `json:"num_hidden_layers"`
	Heads             int      `json:"num_attention_heads"`
	KVHeads           *int     `json:"num_key_value_heads"`
	HeadDim           int      `json:"head_dim"`
	Vocab             int      `json:"vocab_size"`
	TieWordEmbeddings bool     `json:"tie_word_embeddings"`
	TorchDType        string   `json:"torch_dtype"`
	DType             string   `json:"dtype"` // transformers ≥ 4.56 writes dtype

	NumExperts         int      `json:"num_experts"`
	NumLocalExperts    int      `json:"num_local_experts"`
	NRoutedExperts     int      `json:"n_routed_experts"`
	ExpertsPerTok      int      `json:"num_experts_per_tok"`
	ExpertsPerToken    int      `json:"experts_per_token"` // gpt-oss
	MoEIntermediate    int      `json:"moe_intermediate_size"`
	SharedIntermediate int      `json:"shared_expert_intermediate_size"`
	NSharedExperts     int      `json:"n_shared_experts"`
	FirstKDenseReplace int      `json:"first_k_dense_replace"`
	DecoderSparseStep  int      `json:"decoder_sparse_step"`
	MLPOnlyLayers      []int    `json:"mlp_only_layers"`
	QLoRARank          int      `json:"q_lora_rank"`
	KVLoRARank         int      `json:"kv_lora_rank"`
	QKNopeHeadDim      int      `json:"qk_nope_head_dim"`
	QKRopeHeadDim      int      `json:"qk_rope_head_dim"`
	VHeadDim           int      `json:"v_head_dim"`
	SlidingWindow      *int     `json:"sliding_window"`
	LayerTypes         []string `json:"layer_types"` // sliding_attention / full_attention per layer (gpt-oss)
	QuantizationConfig *hfQuant `json:"quantization_config"`
}

// hfQuant is config.json's quantization_config: the checkpoint's weight format.
type hfQuant struct {
	QuantMethod string `json:"quant_method"`
	Bits        int    `json:"bits"`
	GroupSize   int    `json:"group_size"`
}

// ModelFromHFConfig builds a model card from a Hugging Face config.json (data), named name
// (what --model-path reports; "" → the config's _name_or_path). It reads the three families
// SGLang serves most — dense GQA, mixture of experts and DeepSeek's MLA (hfConfig) — and
// counts parameters from the shapes: embeddings (and an untied lm_head), per layer the
// attention projections, the dense FFN or the routed and shared experts with their router.
// Weights are stored as torch_dtype says, or as quantization_config says: fp8 (1 byte, FP8
// GEMMs), mxfp4 (routed experts at 4.25 bits), gptq/awq (bits plus a 16-bit scale and zero per
// group, embeddings in 16 bits). The KV cache is in the activation dtype (SGLang's
// --kv-cache-dtype auto). Norms, biases and a multi-token-prediction layer (loaded only with
// speculative decoding) are left out: under 0.1 % of any of the cards here.
func ModelFromHFConfig(name string, data []byte) (ModelCard, error) {
	var h hfConfig
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&h); err != nil {
		return ModelCard{}, fmt.Errorf("engine: config.json: %w", err)
	}
	if name == "" {
		name = h.NameOrPath
	}
	if name == "" {
		return ModelCard{}, fmt.Errorf("engine: config.json has no _name_or_path: name the model (--model-path)")
	}
	for _, f := range []struct {
		key string
		v   int
	}{{"hidden_size", h.Hidden}, {"num_hidden_layers", h.Layers}, {"num_attention_heads", h.Heads}, {"vocab_size", h.Vocab}} {
		if f.v <= 0 {
			return ModelCard{}, fmt.Errorf("engine: config.json: %s %d must be > 0 (is it a causal language model's config.json?)", f.key, f.v)
		}
	}
	m := ModelCard{Name: name, Hidden: h.Hidden, Layers: h.Layers, Heads: h.Heads, Vocab: h.Vocab}
	if len(h.Architectures) > 0 {
		m.Architecture = h.Architectures[0]
	}
	hidden := float64(h.Hidden)

	// Attention.
	var attnPerLayer float64
	if h.KVLoRARank > 0 {
		// MLA: the cached latent is kv_lora_rank + qk_rope_head_dim wide; KVHeads 1 × HeadDim of
		// half of it reproduces its elements in the K+V count (ModelCard.KVHeads).
		if h.QKNopeHeadDim <= 0 || h.QKRopeHeadDim <= 0 || h.VHeadDim <= 0 {
			return ModelCard{}, fmt.Errorf("engine: config.json: kv_lora_rank %d needs qk_nope_head_dim, qk_rope_head_dim and v_head_dim", h.KVLoRARank)
		}
		qk := float64(h.QKNopeHeadDim + h.QKRopeHeadDim)
		heads := float64(h.Heads)
		if h.QLoRARank > 0 {
			attnPerLayer = hidden*float64(h.QLoRARank) + float64(h.QLoRARank)*heads*qk
		} else {
			attnPerLayer = hidden * heads * qk
		}
		latent := float64(h.KVLoRARank + h.QKRopeHeadDim)
		attnPerLayer += hidden*latent + float64(h.KVLoRARank)*heads*float64(h.QKNopeHeadDim+h.VHeadDim) + heads*float64(h.VHeadDim)*hidden
		if (h.KVLoRARank+h.QKRopeHeadDim)%2 != 0 {
			return ModelCard{}, fmt.Errorf("engine: config.json: kv_lora_rank + qk_rope_head_dim %d must be even", h.KVLoRARank+h.QKRopeHeadDim)
		}
		m.KVHeads, m.HeadDim = 1, (h.KVLoRARank+h.QKRopeHeadDim)/2
		// SGLang's absorbed decode attends over the latent (QKᵀ over latent + rope, AV over the
		// latent); prefill runs multi-head attention over the decompressed K and V.
		m.AttnFLOPsPerPair = 2 * heads * (latent + float64(h.KVLoRARank))
		m.PrefillAttnFLOPsPerPair = 2 * heads * (qk + float64(h.VHeadDim))
	} else {
		m.KVHeads = h.Heads
		if h.KVHeads != nil {
			m.KVHeads = *h.KVHeads
		}
		m.HeadDim = h.HeadDim
		if m.HeadDim == 0 {
			if h.Hidden%h.Heads != 0 {
				return ModelCard{}, fmt.Errorf("engine: config.json: hidden_size %d is not a multiple of num_attention_heads %d: give head_dim", h.Hidden, h.Heads)
			}
			m.HeadDim = h.Hidden / h.Heads
		}
		if m.KVHeads <= 0 || h.Heads%m.KVHeads != 0 {
			return ModelCard{}, fmt.Errorf("engine: config.json: num_key_value_heads %d must divide num_attention_heads %d", m.KVHeads, h.Heads)
		}
		q := float64(h.Heads * m.HeadDim)
		kv := float64(m.KVHeads * m.HeadDim)
		attnPerLayer = 2*hidden*q + 2*hidden*kv // Q and O, K and V
	}
	m.AttnParams = attnPerLayer * float64(h.Layers)
	for _, t := range h.LayerTypes {
		if t == "sliding_attention" {
			m.SlidingLayers++
		}
	}
	if m.SlidingLayers > 0 {
		if h.SlidingWindow == nil || *h.SlidingWindow <= 0 {
			return ModelCard{}, fmt.Errorf("engine: config.json: layer_types has sliding_attention layers but no sliding_window")
		}
		m.SlidingWindow = *h.SlidingWindow
	}

	// FFN: which layers are MoE, their experts and the dense ones.
	experts := max(h.NumExperts, h.NumLocalExperts, h.NRoutedExperts)
	topK := max(h.ExpertsPerTok, h.ExpertsPerToken)
	var dense, routed, shared, gates float64
	if experts > 0 {
		if topK <= 0 || topK > experts {
			return ModelCard{}, fmt.Errorf("engine: config.json: num_experts_per_tok %d must be in [1, %d]", topK, experts)
		}
		expertWidth := h.MoEIntermediate
		if expertWidth == 0 {
			expertWidth = h.Intermediate // Mixtral, gpt-oss
		}
		if expertWidth <= 0 {
			return ModelCard{}, fmt.Errorf("engine: config.json: a mixture of %d experts needs moe_intermediate_size or intermediate_size", experts)
		}
		step := max(1, h.DecoderSparseStep)
		for i := range h.Layers {
			moe := i >= h.FirstKDenseReplace && (i+1)%step == 0 && !slices.Contains(h.MLPOnlyLayers, i)
			if !moe {
				dense += 3 * hidden * float64(h.Intermediate)
				continue
			}
			m.MoELayers++
			routed += float64(experts) * 3 * hidden * float64(expertWidth)
			shared += float64(h.NSharedExperts)*3*hidden*float64(expertWidth) + 3*hidden*float64(h.SharedIntermediate)
			gates += hidden * float64(experts)
		}
		m.Experts, m.TopK, m.RoutedParams = experts, topK, routed
	} else {
		if h.Intermediate <= 0 {
			return ModelCard{}, fmt.Errorf("engine: config.json: intermediate_size %d must be > 0", h.Intermediate)
		}
		dense = float64(h.Layers) * 3 * hidden * float64(h.Intermediate)
	}
	embed := float64(h.Vocab) * hidden
	if !h.TieWordEmbeddings {
		embed *= 2 // lm_head
	}
	m.Params = embed + m.AttnParams + dense + routed + shared + gates
	m.ActiveParams = m.Params - routed
	if experts > 0 {
		m.ActiveParams += routed * float64(topK) / float64(experts)
	}

	// Storage and GEMM precision.
	dtype := h.TorchDType
	if dtype == "" {
		dtype = h.DType
	}
	switch strings.ToLower(dtype) {
	case "bfloat16", "float16", "":
		m.DTypeBytes = 2
	case "float32":
		m.DTypeBytes = 2 // SGLang's --dtype auto serves float32 checkpoints in bfloat16
	default:
		return ModelCard{}, fmt.Errorf("engine: config.json: torch_dtype %q is not bfloat16, float16 or float32", dtype)
	}
	m.KVDTypeBytes = m.DTypeBytes
	if q := h.QuantizationConfig; q != nil {
		switch strings.ToLower(q.QuantMethod) {
		case "fp8":
			m.DTypeBytes, m.GEMM = 1, PrecisionFP8
		case "mxfp4":
			m.ExpertDTypeBytes = 4.25 / 8 // 4-bit values, one 8-bit scale per 32
			if experts == 0 {
				return ModelCard{}, fmt.Errorf("engine: config.json: quantization_config mxfp4 without experts is not modelled")
			}
		case "gptq", "awq":
			bits := q.Bits
			if bits <= 0 || bits > 8 {
				return ModelCard{}, fmt.Errorf("engine: config.json: quantization_config.bits %d must be in [1, 8]", bits)
			}
			group := q.GroupSize
			if group <= 0 {
				group = 128
			}
			// Quantized linear layers: bits per weight plus a 16-bit scale and a packed zero
			// point per group; embeddings and lm_head stay in 16 bits. GEMMs dequantize to 16
			// bits, so they run at the BF16 rate. One average over all weights.
			perWeight := float64(bits)/8 + (2+float64(bits)/8)/float64(group)
			m.DTypeBytes = (embed*2 + (m.Params-embed)*perWeight) / m.Params
		default:
			return ModelCard{}, fmt.Errorf("engine: config.json: quantization_config.quant_method %q is not modelled (fp8, mxfp4, gptq, awq)", q.QuantMethod)
		}
	}
	return m, nil
}
