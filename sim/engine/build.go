package engine

import (
	"cmp"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Parallelism is how one SGLang server spreads a model over its GPUs, in SGLang's terms
// (python/sglang/srt/server_args.py): --tp-size GPUs per server, --dp-size data-parallel
// ranks, --ep-size expert-parallel ranks, --enable-dp-attention. Without DP attention a
// server of TP GPUs and DP ranks runs DP replicas of TP/DP GPUs each; with it, attention is
// data-parallel over DP ranks of TP/DP GPUs and the FFN/MoE layers span all TP GPUs (EP of
// them for experts).
type Parallelism struct {
	TP          int  // --tp-size: GPUs of the server; 0 → 1
	DP          int  // --dp-size: DP ranks; 0 → 1
	EP          int  // --ep-size: expert-parallel size (MoE); 0 → 1 (experts tensor-parallel)
	DPAttention bool // --enable-dp-attention
	// GPUsPerNode is the GPUs one node holds (NVLink domain); collectives among more GPUs than
	// that cross the scale-out network. 0 → 8.
	GPUsPerNode int
	// TwoBatchOverlap is --enable-two-batch-overlap: communication of one micro-batch hides
	// behind computation of the other.
	TwoBatchOverlap bool
	// DeepEPMode is --deepep-mode ("normal", "low_latency", "auto"); "" without DeepEP.
	DeepEPMode string
	// CombineOverlap is the fine-grained overlap of the GB200 part II blog ("Computation
	// Communication Overlap": the MoE combine runs while the down GEMM and the shared experts
	// compute, signalled from inside the GEMM) in place of two-batch overlap: the combine half
	// of a step's communication hides behind the down projection, a third of the routed-expert
	// FLOPs (gate and up are the other two).
	CombineOverlap bool
	// WeightOffload is SGLang's layer-wise weight offloading (SGLANG_OFFLOAD_GROUP_SIZE,
	// SGLANG_OFFLOAD_NUM_OFFLOAD_IN_GROUP, SGLANG_OFFLOAD_PREFETCH_STEP;
	// python/sglang/srt/offloader.py ModuleOffloader): the routed experts of some MoE layers
	// stay in host memory and each is copied in on a side stream ahead of its layer. Build
	// offloads the fewest layers that leave OffloadKVShare of the static memory for KV, under
	// DP attention on a GPU with a HostLinkBandwidth (GB200 part II's small prefill instances).
	WeightOffload bool
}

// WithDefaults returns p with zero fields at their defaults.
func (p Parallelism) WithDefaults() Parallelism {
	if p.TP == 0 {
		p.TP = 1
	}
	if p.DP == 0 {
		p.DP = 1
	}
	if p.EP == 0 {
		p.EP = 1
	}
	if p.GPUsPerNode == 0 {
		p.GPUsPerNode = 8
	}
	return p
}

// Validate reports the first invalid field, with SGLang's flag name.
func (p Parallelism) Validate() error {
	p = p.WithDefaults()
	switch {
	case p.TP < 1:
		return fmt.Errorf("engine: --tp-size %d must be ≥ 1", p.TP)
	case p.DP < 1 || p.TP%p.DP != 0:
		return fmt.Errorf("engine: --dp-size %d must be ≥ 1 and divide --tp-size %d", p.DP, p.TP)
	case p.EP < 1 || p.TP%p.EP != 0:
		return fmt.Errorf("engine: --ep-size %d must be ≥ 1 and divide --tp-size %d", p.EP, p.TP)
	case p.GPUsPerNode < 1:
		return fmt.Errorf("engine: GPUs per node %d must be ≥ 1", p.GPUsPerNode)
	case p.DeepEPMode != "" && p.DeepEPMode != "normal" && p.DeepEPMode != "low_latency" && p.DeepEPMode != "auto":
		return fmt.Errorf("engine: --deepep-mode %q must be normal, low_latency or auto", p.DeepEPMode)
	}
	return nil
}

// Build derives the profile of one DP rank of a server running model m on GPU g with
// parallelism par (see Parallelism). The server runs with Config.DPSize = par.DP and
// Config.DPAttention = par.DPAttention. GPUsPerNode 0 takes the GPU's NVLink domain
// (g.NVLinkDomain, 8 if unset).
//
// Per GPU, with F the GEMM rate at the layer's precision × efficiency, F_attn the attention
// rate, bw = HBMBandwidth·MemoryEfficiency, a = TP/DP the GPUs of one rank:
//
//	linear(tok)  = 2·(active params of the layers) / F             (split over the GPUs sharing them)
//	attention    = attention FLOPs per query×key pair / F_attn      (A2 prefill form, C2 decode form)
//	weights read = bytes / bw                                       (PrefillM0 and M0: each GPU its share)
//	KV read      = KV bytes per token per GPU / bw                  (M2; MLA's latent is replicated over a rank's GPUs)
//	TP all-reduce (a > 1): 2 per layer of the hidden state in BF16, ring volume 2(a−1)/a over NVLink
//	             (the NIC when a spans nodes): per token in A1 and B1, latency per step in A0 and B0
//
// Without DP attention each of the DP ranks is a TP group of a GPUs holding the whole model;
// its MoE layers cost the TP all-reduces whatever --ep-size and --deepep-mode say (an
// approximation: the expert work per GPU is the same, DeepEP's volume is not modelled there).
// With it, each rank holds the attention and the other non-expert layers (SGLang's DP dense
// FFN, --moe-dense-tp-size 1, and replicated shared experts) and the routed experts are spread
// over all TP GPUs (EP of them, TP/EP-way sliced within); for a dense model the FFN runs
// tensor-parallel over all TP GPUs on the gathered batch. The expert and communication costs
// are per GPU of the server: see DPAttnSplit and epComm.
func Build(name string, m ModelCard, g GPU, par Parallelism) (Profile, error) {
	if par.GPUsPerNode == 0 {
		par.GPUsPerNode = g.NVLinkDomain
	}
	if err := par.Validate(); err != nil {
		return Profile{}, err
	}
	par = par.WithDefaults()
	if err := m.check(name); err != nil {
		return Profile{}, err
	}
	if err := g.check(name); err != nil {
		return Profile{}, err
	}
	if par.DPAttention {
		return buildDPAttention(name, m, g, par)
	}
	return buildReplicas(name, m, g, par)
}

// rates holds one build's per-GPU speeds.
type rates struct {
	dense, expert, attn float64 // FLOP/s at efficiency: dense GEMMs, routed-expert GEMMs, attention
	bw                  float64 // HBM bytes/s at efficiency
}

func (g GPU) rates(m ModelCard) rates {
	attnPrec := PrecisionBF16
	if m.kvDType() <= 1 {
		attnPrec = PrecisionFP8 // FP8 KV: FP8 attention kernels (GB200 part II)
	}
	return rates{
		dense:  g.rate(m.GEMM),
		expert: g.rate(m.expertGEMM()),
		attn:   g.rate(attnPrec),
		bw:     g.HBMBandwidth * g.MemoryEfficiency,
	}
}

// layerCosts are the model's per-token quantities one build splits over GPUs.
type layerCosts struct {
	attnBytes, otherBytes, routedBytes float64 // weights: attention, other non-routed, routed experts
	attnLin, otherLin, expertLin       float64 // FLOPs per token in each
	swaPerToken                        float64 // sliding-window attention FLOPs per new token (window-bound)
	swaKVPerRequest                    float64 // sliding-window KV bytes read per decode request
}

func (m ModelCard) costs(r rates) layerCosts {
	active := m.RoutedParams * float64(m.TopK) / math.Max(float64(m.Experts), 1)
	// Attention parameters in the experts' format (LowPrecisionAttnParams) read as the experts'
	// bytes and compute at the expert rate, counted here in dense-rate FLOPs.
	lp := m.LowPrecisionAttnParams
	lpFLOPs := 2 * lp
	if r.expert > 0 {
		lpFLOPs *= r.dense / r.expert
	}
	c := layerCosts{
		attnBytes:   (m.AttnParams-lp)*m.DTypeBytes + lp*m.expertBytes(),
		otherBytes:  (m.Params - m.AttnParams - m.RoutedParams) * m.DTypeBytes,
		routedBytes: m.RoutedParams * m.expertBytes(),
		attnLin:     2*(m.AttnParams-lp) + lpFLOPs,
		otherLin:    2 * (m.ActiveParams - m.AttnParams - active),
		expertLin:   2 * active,
	}
	if m.SlidingLayers > 0 && m.SlidingWindow > 0 {
		w := float64(m.SlidingWindow)
		c.swaPerToken = w * m.pairFLOPs(false) * float64(m.SlidingLayers)
		c.swaKVPerRequest = w * 2 * float64(m.SlidingLayers*m.KVHeads*m.HeadDim) * m.kvDType()
	}
	return c
}

// tpComm is the tensor-parallel all-reduce cost of a group of a GPUs: seconds per token and
// per step (2 all-reduces per layer of the BF16 hidden state: after attention and after the
// MLP, python/sglang/srt/layers/linear.py RowParallelLinear with reduce_results).
func tpComm(m ModelCard, g GPU, a, gpusPerNode int) (perTok, fixed float64) {
	if a <= 1 {
		return 0, 0
	}
	link := g.NVLinkBandwidth
	if a > gpusPerNode {
		link = g.NICBandwidth
	}
	link *= CollectiveEfficiency
	n := 2 * float64(m.Layers)
	vol := 2 * float64(a-1) / float64(a) * float64(m.Hidden) * 2 // ring all-reduce bytes per GPU per token
	if link > 0 {
		perTok = n * vol / link
	}
	return perTok, n * g.AllReduceLatency
}

func buildReplicas(name string, m ModelCard, g GPU, par Parallelism) (Profile, error) {
	a := par.TP / par.DP
	af := float64(a)
	r := g.rates(m)
	c := m.costs(r)
	weights := c.attnBytes + c.otherBytes + c.routedBytes
	kvGPU := m.kvPoolBytesPerGPU(a)
	capacity := (g.MemoryBytes*g.MemFractionStatic - weights/af) / kvGPU
	if capacity < 1 {
		return Profile{}, fmt.Errorf("engine: roofline %s: %s weights (%.0f GB) do not fit in %d×%s (--tp-size %d --dp-size %d)",
			name, m.Name, weights/1e9, a, g.Name, par.TP, par.DP)
	}
	commTok, commFixed := tpComm(m, g, a, par.GPUsPerNode)
	lin := ((c.attnLin+c.otherLin)/r.dense + c.expertLin/r.expert + c.swaPerToken/r.attn) / af
	return Profile{
		Name:            name,
		A0:              g.PrefillOverhead + commFixed,
		PrefillM0:       (c.attnBytes+c.otherBytes)/(af*r.bw) + c.routedBytes/(af*g.prefillExpertBW(m)),
		A1:              lin + commTok,
		A2:              m.attnPairFLOPs(true) / (af * r.attn),
		B0:              commFixed + float64(m.MoELayers)*g.MoELayerOverhead,
		DecodeHost:      g.DecodeOverhead,
		B1:              commTok + c.swaKVPerRequest/(af*r.bw),
		M0:              (c.attnBytes + c.otherBytes) / (af * r.bw),
		ExpertM0:        c.routedBytes / (af * r.bw),
		Experts:         m.Experts,
		TopK:            m.TopK,
		M2:              m.kvReadPerGPU(a) / r.bw,
		C1:              lin,
		C2:              m.attnPairFLOPs(false) / (af * r.attn),
		T0:              0.001,
		PDOverhead:      g.pdOverhead(),
		KVBytesPerToken: m.kvBytesPerToken(),
		MaxTotalTokens:  int(capacity),
		Source:          fmt.Sprintf("roofline: %s on %s", m.Name, par.describe(g)),
	}, nil
}

func buildDPAttention(name string, m ModelCard, g GPU, par Parallelism) (Profile, error) {
	n := par.TP
	nf := float64(n)
	a := par.TP / par.DP
	af := float64(a)
	r := g.rates(m)
	c := m.costs(r)
	moe := m.RoutedParams > 0
	// Per rank: attention, and for a MoE model the other non-routed layers too (DP dense FFN,
	// replicated shared experts); per GPU of the server: routed experts, or a dense model's FFN.
	rankBytes, rankLin := c.attnBytes, c.attnLin
	sharedBytes, sharedLin, sharedRate := c.otherBytes, c.otherLin, r.dense
	if moe {
		rankBytes += c.otherBytes
		rankLin += c.otherLin
		sharedBytes, sharedLin, sharedRate = 0, c.expertLin, r.expert
	}
	kvGPU := m.kvPoolBytesPerGPU(a)
	budget := g.MemoryBytes * g.MemFractionStatic
	resident := rankBytes/af + (sharedBytes+c.routedBytes)/nf
	offloaded := 0.0 // routed-expert bytes per GPU kept in host memory
	if par.WeightOffload && g.HostLinkBandwidth > 0 && moe && resident > (1-OffloadKVShare)*budget {
		perLayer := c.routedBytes / nf / float64(max(m.MoELayers, 1))
		layers := min(math.Ceil((resident-(1-OffloadKVShare)*budget)/perLayer), float64(m.MoELayers))
		offloaded = layers * perLayer
	}
	capacity := (budget - resident + offloaded) / kvGPU
	if capacity < 1 {
		return Profile{}, fmt.Errorf("engine: roofline %s: %s weights (%.0f GB per GPU) do not fit in %s (--tp-size %d --dp-size %d --enable-dp-attention)",
			name, m.Name, (rankBytes/af+(sharedBytes+c.routedBytes)/nf)/1e9, g.Name, par.TP, par.DP)
	}
	commTok, commFixed := tpComm(m, g, a, par.GPUsPerNode)
	attnLin := (rankLin/r.dense + c.swaPerToken/r.attn) / af
	imb := 1.0
	if moe && par.EP > 1 {
		imb = epImbalance(par.EP, m.Experts)
	}
	d := &DPAttnSplit{
		GPUs:     n,
		AttnA1:   attnLin + commTok,
		AttnM0:   rankBytes / (af * r.bw),
		AttnC1:   attnLin,
		FFNM0:    sharedBytes / (nf * r.bw),
		ExpertM0: c.routedBytes / (nf * r.bw),
		FFNC1:    imb * sharedLin / (nf * sharedRate),
	}
	if g.PrefillExpertEfficiency > 0 || g.PrefillExpertEfficiencyBF16 > 0 {
		d.PrefillExpertM0 = c.routedBytes / (nf * g.prefillExpertBW(m))
	}
	// Offloaded experts cross the host link every forward pass; the copies run on a side
	// stream ahead of their layers, overlapping the step's compute (DPAttnSplit.OffloadCopy).
	if offloaded > 0 {
		d.OffloadCopy = offloaded / g.HostLinkBandwidth
	}
	layers := m.MoELayers
	if !moe {
		layers = m.Layers
	}
	switch par.DeepEPMode {
	case "":
		// dp_attention.py: dp_gather all-gathers every rank's hidden states (BF16) before the
		// MoE/FFN and dp_scatter reduce-scatters after; each GPU moves (n−1)/n of all tokens.
		link := g.NVLinkBandwidth
		if n > par.GPUsPerNode {
			link = g.NICBandwidth
		}
		link *= CollectiveEfficiency
		if link > 0 && n > 1 {
			d.CommPerToken = 2 * float64(layers) * (nf - 1) / nf * float64(m.Hidden) * 2 / link
		}
		if n > 1 {
			d.CommFixed = 2 * float64(layers) * g.AllReduceLatency
		}
	case "normal":
		d.CommPerToken, d.CommFixed = epComm(m, g, par, false)
	case "low_latency":
		d.CommPerToken, d.CommFixed = epComm(m, g, par, true)
	case "auto":
		d.CommPerToken, d.CommFixed = epComm(m, g, par, false)
		d.LLCommPerToken, d.LLCommFixed = epComm(m, g, par, true)
		d.LLMaxTokens = DeepEPLowLatencyMaxTokens
		if par.TwoBatchOverlap {
			d.LLMaxTokens *= 2 // each micro-batch has its own low-latency buffer
		}
	}
	// Each GPU sends its own tokens' copies (balanced) and receives those routed to its
	// experts (the most loaded GPU's share): half the volume carries the imbalance.
	d.CommPerToken *= (1 + imb) / 2
	d.LLCommPerToken *= (1 + imb) / 2
	d.CombineOverlap = par.CombineOverlap
	if par.TwoBatchOverlap {
		d.TwoBatchOverlap = true
		d.Hide = d.AttnA1 / float64(par.DP)
		d.LLHide = d.AttnC1 / float64(par.DP)
		d.OverlapOverhead = float64(m.Layers) * TwoBatchOverlapLayerOverhead
		if par.DeepEPMode == "low_latency" {
			d.Hide = d.LLHide
		}
	}
	return Profile{
		Name:            name,
		A0:              g.PrefillOverhead + commFixed,
		PrefillM0:       rankBytes / (af * r.bw),
		A1:              attnLin + commTok + sharedLin/(af*sharedRate), // the rank alone holding everything (runs without --dp-attention)
		A2:              m.attnPairFLOPs(true) / (af * r.attn),
		B0:              commFixed + float64(m.MoELayers)*g.MoELayerOverhead,
		DecodeHost:      g.DecodeOverhead,
		B1:              commTok + c.swaKVPerRequest/(af*r.bw),
		M0:              (rankBytes + sharedBytes) / (af * r.bw),
		ExpertM0:        c.routedBytes / (af * r.bw),
		Experts:         m.Experts,
		TopK:            m.TopK,
		M2:              m.kvReadPerGPU(a) / r.bw,
		C1:              attnLin + sharedLin/(af*sharedRate),
		C2:              m.attnPairFLOPs(false) / (af * r.attn),
		T0:              0.001,
		PDOverhead:      g.pdOverhead(),
		DPAttn:          d,
		KVBytesPerToken: m.kvBytesPerToken(),
		MaxTotalTokens:  int(capacity),
		Source:          fmt.Sprintf("roofline: %s on %s", m.Name, par.describe(g)),
	}, nil
}

// epComm is DeepEP's dispatch (FP8 hidden state plus one FP32 scale per 128 values) and
// combine (BF16) cost under DP attention, in seconds per gathered token (already divided by
// the server's GPU count: each GPU sends and receives only its own tokens' copies) and fixed
// seconds per step, over all MoE layers (python/sglang/srt/layers/moe/token_dispatcher/
// deepep.py: DeepEPNormalDispatcher / DeepEPLLDispatcher around the grouped GEMMs of
// ep_moe/layer.py DeepEPMoE).
//
//   - low latency: every one of a token's top-k copies goes straight to its expert's GPU
//     (pure RDMA to other nodes, NVLink within), so per token (k·(GPUs−1)/GPUs) copies, the
//     share on other nodes at DeepEPLowLatencyNICShare of the NIC;
//   - normal: a token crosses the network once per destination node and is forwarded over
//     NVLink inside it; the distinct remote nodes of k uniformly routed experts are
//     (nodes−1)·(1 − (1 − 1/nodes)^k); the step takes the slower of the RDMA and NVLink legs,
//     the NIC at DeepEPNormalNICShare.
func epComm(m ModelCard, g GPU, par Parallelism, lowLatency bool) (perTok, fixed float64) {
	n := par.TP
	if n <= 1 || m.MoELayers == 0 {
		return 0, 0
	}
	nf, k := float64(n), float64(m.TopK)
	perNode := min(par.GPUsPerNode, n)
	nodes := math.Ceil(nf / float64(perNode))
	dispatch := 1 + 4.0/128 // FP8 values + one FP32 scale per 128
	if m.expertGEMM() == PrecisionFP4 {
		// NVFP4 experts: DeepEP quantizes the dispatched tokens to NVFP4 (4-bit values + one
		// FP8 scale per 16), "halving the required network traffic" (LMSYS GB200 part II blog,
		// "Fusing NVFP4 in DeepEP"); set by deepseek-gb200-nvl72-pd-ep-part2's low-precision decode.
		dispatch = 0.5 + 1.0/16
	}
	bytes := float64(m.Hidden)*dispatch + float64(m.Hidden)*2 // dispatch, then combine in BF16
	nvl := g.NVLinkBandwidth * CollectiveEfficiency
	var t float64
	if lowLatency {
		remote := (nf - float64(perNode)) / nf
		local := (float64(perNode) - 1) / nf
		nic := g.NICBandwidth * DeepEPLowLatencyNICShare
		if remote > 0 && nic > 0 {
			t += k * remote * bytes / nic
		}
		if nvl > 0 {
			t += k * local * bytes / nvl
		}
		fixed = 2 * float64(m.MoELayers) * g.EPLowLatency
	} else {
		var rdma, fwd float64
		if nodes > 1 && g.NICBandwidth > 0 {
			rdma = (nodes - 1) * (1 - math.Pow(1-1/nodes, k)) * bytes / (g.NICBandwidth * DeepEPNormalNICShare)
		}
		if nvl > 0 {
			fwd = k * (1 - 1/float64(perNode)) * bytes / nvl
		}
		t = max(rdma, fwd)
		fixed = 2 * float64(m.MoELayers) * g.EPNormalLatency
	}
	return float64(m.MoELayers) * t / nf, fixed
}

// epImbalance is the most loaded GPU's routed-expert work over the mean at EP over gpus GPUs
// holding experts routed experts per layer. Expert loads vary with the data (the blogs run
// in-distribution data, EPLB placing the experts); a GPU's load sums its experts/gpus experts,
// so its spread shrinks as sqrt(gpus/experts), and the slowest of gpus GPUs sits z(gpus)
// spreads above the mean, z the expected maximum of gpus standard normal draws (Blom's
// approximation Φ⁻¹((g − 0.375)/(g + 0.25))). Scaled so that EP32 over 256 experts — the
// deepseek-v3-h100-pd-ep-96gpu prefill that fixed EPImbalance — gives EPImbalance, and capped
// there: the decode sets at EP48–96 (deepseek-v3-h100-pd-ep-96gpu, kimi-k2-h200-pd-ep-128gpu,
// the GB200 decodes) ran EPLB with redundant experts and are fitted at EPImbalance. At EP4 the
// slowest GPU is ~4 % above the mean, which the GB200 part II blog names among the gains of
// small prefill instances ("it may reduce the time wasted waiting for the slowest rank";
// set by deepseek-gb200-nvl72-pd-ep-part2's 4- and 2-GPU prefill).
func epImbalance(gpus, experts int) float64 {
	if gpus <= 1 || experts <= 0 {
		return 1
	}
	spread := func(g, e float64) float64 {
		p := (g - 0.375) / (g + 0.25)
		return math.Sqrt2 * math.Erfinv(2*p-1) * math.Sqrt(g/e)
	}
	return 1 + (EPImbalance-1)*min(1, spread(float64(gpus), float64(experts))/spread(32, 256))
}

func (p Parallelism) describe(g GPU) string {
	s := fmt.Sprintf("%d×%s TP%d", p.TP, g.Name, p.TP)
	if p.DP > 1 {
		s += fmt.Sprintf(" DP%d", p.DP)
	}
	if p.EP > 1 {
		s += fmt.Sprintf(" EP%d", p.EP)
	}
	if p.DPAttention {
		s += " DP-attention"
	}
	if p.DeepEPMode != "" {
		s += " DeepEP " + p.DeepEPMode
	}
	if p.TwoBatchOverlap {
		s += " TBO"
	}
	if p.WeightOffload {
		s += " weight offload"
	}
	if p.CombineOverlap {
		s += " combine overlap"
	}
	if p.TP > p.GPUsPerNode {
		s += fmt.Sprintf(" over %d nodes", (p.TP+p.GPUsPerNode-1)/p.GPUsPerNode)
	}
	return s
}

// Models returns the model cards by name (sorted by name); each card's Aliases (Hugging Face
// ids) name it too.
func Models() []ModelCard {
	ms := []ModelCard{Llama3Dense8B, Llama3Dense70B, Qwen3MoE30BA3B, DeepSeekV3, DeepSeekV3FP4, KimiK2, Qwen25Dense7B, Qwen25Dense7BGPTQ, GPTOSS120B}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	return ms
}

// GPUs returns the GPU descriptions, sorted by name.
func GPUs() []GPU {
	gs := []GPU{A100SXM, H100SXM, H200SXM, H20, A10, B200, GB200}
	sort.Slice(gs, func(i, j int) bool { return gs[i].Name < gs[j].Name })
	return gs
}

// LookupModel returns the model card called name (its Name or one of its Aliases, case
// insensitive), or an error listing the valid names.
func LookupModel(name string) (ModelCard, error) {
	var names []string
	for _, m := range Models() {
		if strings.EqualFold(m.Name, name) {
			return m, nil
		}
		for _, a := range m.Aliases {
			if strings.EqualFold(a, name) {
				return m, nil
			}
		}
		names = append(names, m.Name)
	}
	return ModelCard{}, fmt.Errorf("engine: unknown model %q (valid: %s)", name, strings.Join(names, ", "))
}

// LookupGPU returns the GPU called name (case insensitive), or an error listing the names.
func LookupGPU(name string) (GPU, error) {
	var names []string
	for _, g := range GPUs() {
		if strings.EqualFold(g.Name, name) {
			return g, nil
		}
		names = append(names, g.Name)
	}
	return GPU{}, fmt.Errorf("engine: unknown GPU %q (valid: %s)", name, strings.Join(names, ", "))
}

// ServerArgs are SGLang's engine arguments that shape scheduling and memory, with SGLang's
// names (python/sglang/srt/server_args.py). Zero fields are unset: WithSGLangDefaults fills
// them as SGLang would for the GPU and parallelism, Apply leaves unset ones to Config's
// defaults.
type ServerArgs struct {
	ChunkedPrefillSize       int     `json:"chunked_prefill_size,omitempty" yaml:"chunked_prefill_size,omitempty"`
	MaxRunningRequests       int     `json:"max_running_requests,omitempty" yaml:"max_running_requests,omitempty"`
	MaxTotalTokens           int     `json:"max_total_tokens,omitempty" yaml:"max_total_tokens,omitempty"`
	PageSize                 int     `json:"page_size,omitempty" yaml:"page_size,omitempty"`
	CUDAGraphMaxBS           int     `json:"cuda_graph_max_bs,omitempty" yaml:"cuda_graph_max_bs,omitempty"`
	MemFractionStatic        float64 `json:"mem_fraction_static,omitempty" yaml:"mem_fraction_static,omitempty"`
	ScheduleConservativeness float64 `json:"schedule_conservativeness,omitempty" yaml:"schedule_conservativeness,omitempty"`
	// KVCacheDType is SGLang's --kv-cache-dtype: auto ("": the model's) or fp8_e4m3 / fp8_e5m2,
	// one byte per KV element: twice the pool's tokens, half the KV a step reads and moves,
	// and FP8 attention kernels (BuildServer; a model card's KVDTypeBytes).
	KVCacheDType string `json:"kv_cache_dtype,omitempty" yaml:"kv_cache_dtype,omitempty"`
	// Spec is speculative decoding (--speculative-algorithm …, spec.go); its keys sit beside
	// the others.
	Spec `yaml:",inline"`
	// HiCacheRatio is SGLang's --hicache-ratio (with --enable-hierarchical-cache): a host KV
	// tier of this many times the device pool (Config.HostCacheTokens); 0: none.
	// HiCacheBandwidth is its load-back bandwidth in GB/s (Config.HostCacheBandwidth), ours:
	// SGLang moves what its host link carries.
	HiCacheRatio     float64 `json:"hicache_ratio,omitempty" yaml:"hicache_ratio,omitempty"`
	HiCacheBandwidth float64 `json:"hicache_bandwidth,omitempty" yaml:"hicache_bandwidth,omitempty"`
}

// Apply returns c with the set fields of a copied in. MemFractionStatic is not a Config
// field: it shapes the profile's KV capacity (GPU.MemFractionStatic before Build).
func (a ServerArgs) Apply(c Config) Config {
	if a.ChunkedPrefillSize != 0 {
		c.ChunkedPrefillSize = a.ChunkedPrefillSize
	}
	if a.MaxRunningRequests != 0 {
		c.MaxRunningRequests = a.MaxRunningRequests
	}
	if a.MaxTotalTokens != 0 {
		c.MaxTotalTokens = a.MaxTotalTokens
	}
	if a.PageSize != 0 {
		c.PageSize = a.PageSize
	}
	if a.CUDAGraphMaxBS != 0 {
		c.CUDAGraphMaxBS = a.CUDAGraphMaxBS
	}
	if a.ScheduleConservativeness != 0 {
		c.ScheduleConservativeness = a.ScheduleConservativeness
	}
	if a.Spec.On() {
		c.Spec = a.Spec
	}
	if a.HiCacheRatio != 0 {
		pool := c.MaxTotalTokens
		if pool == 0 {
			pool = c.Profile.MaxTotalTokens
		}
		c.HostCacheTokens = int(a.HiCacheRatio * float64(pool))
	}
	if a.HiCacheBandwidth != 0 {
		c.HostCacheBandwidth = a.HiCacheBandwidth * 1e9
	}
	return c
}

// Precision is the number format a layer's GEMMs run in, which picks the GPU's peak rate.
type Precision string

// The GEMM precisions (GPU.PeakFLOPS, PeakFLOPSFP8, PeakFLOPSFP4).
const (
	PrecisionBF16 Precision = "bf16" // BF16/FP16 tensor cores (also weight-only INT4/FP4 dequantized to 16 bits)
	PrecisionFP8  Precision = "fp8"
	PrecisionFP4  Precision = "fp4" // NVFP4/MXFP4 tensor cores (Blackwell)
)

// ModelCard describes a transformer for the roofline. Parameter counts are totals (not per GPU).
type ModelCard struct {
	Name         string
	Aliases      []string // other names (Hugging Face ids) LookupModel accepts
	Architecture string   // config.json's architectures[0] (SGLang picks speculative defaults by it)
	Vocab        int      // vocab_size: the lm_head a draft model reads (speculative decoding)
	Params       float64  // all parameters (weights read per decode step; MoE: all experts)
	ActiveParams float64  // parameters used per token (dense: = Params)
	AttnParams   float64  // parameters of the attention layers (Q/K/V/O projections, all layers)
	Hidden       int      // hidden width (activations moved by collectives)
	Layers       int
	MoELayers    int // layers whose FFN is a mixture of experts (collectives under EP); 0 for dense
	// RoutedParams are the parameters of the routed experts (all layers); Experts and TopK the
	// routed experts per layer and those each token uses. Zero for dense models.
	RoutedParams  float64
	Experts, TopK int
	Heads         int // query heads
	KVHeads       int // key/value heads (GQA); MLA: 1, with HeadDim half the latent KV width
	HeadDim       int // dimension per head
	// AttnFLOPsPerPair is the decode attention FLOPs per query×key pair and layer; 0 →
	// 4·Heads·HeadDim (QKᵀ and AV). MLA in SGLang's absorbed decode form: 2·Heads·(latent +
	// rope + latent). PrefillAttnFLOPsPerPair is the prefill form; 0 → AttnFLOPsPerPair (MLA
	// prefill runs as multi-head attention over the decompressed K/V: 2·Heads·(192 + 128)).
	AttnFLOPsPerPair        float64
	PrefillAttnFLOPsPerPair float64
	// SlidingLayers of the Layers attend to the last SlidingWindow tokens only (gpt-oss): their
	// attention costs a window per token, not the context, and their KV reads are per request.
	SlidingLayers, SlidingWindow int
	DTypeBytes                   float64   // bytes per weight outside the routed experts (2 BF16, 1 FP8, ~0.53 INT4 with scales)
	ExpertDTypeBytes             float64   // bytes per routed-expert weight; 0 → DTypeBytes
	KVDTypeBytes                 float64   // bytes per KV element; 0 → DTypeBytes. 1 (FP8 KV) runs attention at the FP8 rate
	GEMM                         Precision // precision of the non-expert GEMMs; "" → bf16
	ExpertGEMM                   Precision // precision of the routed-expert GEMMs; "" → GEMM
	// LowPrecisionAttnParams of the AttnParams are stored and run like the routed experts
	// (ExpertDTypeBytes, ExpertGEMM): GB200 part II's NVFP4 attention output projection.
	LowPrecisionAttnParams float64
}

func (m ModelCard) expertBytes() float64 {
	if m.ExpertDTypeBytes > 0 {
		return m.ExpertDTypeBytes
	}
	return m.DTypeBytes
}

func (m ModelCard) expertGEMM() Precision {
	if m.ExpertGEMM != "" {
		return m.ExpertGEMM
	}
	return m.GEMM
}

func (m ModelCard) kvDType() float64 {
	if m.KVDTypeBytes > 0 {
		return m.KVDTypeBytes
	}
	return m.DTypeBytes
}

// kvBytesPerToken is the KV of one token over all layers (what a PD transfer moves and what
// the KV pool holds).
func (m ModelCard) kvBytesPerToken() float64 {
	return 2 * float64(m.Layers*m.KVHeads*m.HeadDim) * m.kvDType()
}

// kvBytesPerGPU is one token's KV on each GPU of an a-GPU tensor-parallel group: KV heads
// split over the GPUs, replicated once there are more GPUs than heads (MLA's single latent
// head is on every GPU), every layer's KV (the pool's cost per token: kvPoolBytesPerGPU).
func (m ModelCard) kvBytesPerGPU(a int) float64 {
	return m.kvBytesPerToken() / float64(max(1, min(a, m.KVHeads)))
}

// SWAFullTokensRatio is SGLang's --swa-full-tokens-ratio default: a hybrid sliding-window
// model's KV pool gives its sliding-window layers 0.8 slots per full-attention token slot
// (python/sglang/srt/server_args.py swa_full_tokens_ratio; model_runner_kv_cache_mixin.py
// set_num_tokens_hybrid_swa solves the memory split and reports the full-layer tokens as
// max_total_num_tokens). Set by gpt-oss-120b-b200-dp4-ep4-pr9359: counting every layer at a
// full slot per token left 1.93 M tokens per rank, short of the 640 × 3,072 its batch reaches.
const SWAFullTokensRatio = 0.8

// kvPoolBytesPerGPU is the KV pool memory one token of max_total_num_tokens costs on each GPU
// of an a-GPU group: the full-attention layers' KV plus SWAFullTokensRatio of the
// sliding-window layers' (kvBytesPerGPU for a model without sliding windows).
func (m ModelCard) kvPoolBytesPerGPU(a int) float64 {
	perLayer := m.kvBytesPerGPU(a) / float64(m.Layers)
	return perLayer * (float64(m.Layers-m.SlidingLayers) + SWAFullTokensRatio*float64(m.SlidingLayers))
}

// kvReadPerGPU is what a decode step reads per context token on each GPU: the KV of the
// layers that attend to the whole context (sliding-window layers read a window per request).
func (m ModelCard) kvReadPerGPU(a int) float64 {
	return m.kvBytesPerGPU(a) * float64(m.Layers-m.SlidingLayers) / float64(m.Layers)
}

// pairFLOPs is the attention FLOPs per query×key pair and layer (prefill or decode form).
func (m ModelCard) pairFLOPs(prefill bool) float64 {
	if prefill && m.PrefillAttnFLOPsPerPair > 0 {
		return m.PrefillAttnFLOPsPerPair
	}
	if m.AttnFLOPsPerPair > 0 {
		return m.AttnFLOPsPerPair
	}
	return 4 * float64(m.Heads*m.HeadDim)
}

// attnPairFLOPs is pairFLOPs over the layers that attend to the whole context.
func (m ModelCard) attnPairFLOPs(prefill bool) float64 {
	return m.pairFLOPs(prefill) * float64(m.Layers-m.SlidingLayers)
}

func (m ModelCard) check(name string) error {
	switch {
	case m.Params <= 0 || m.ActiveParams <= 0 || m.ActiveParams > m.Params:
		return fmt.Errorf("engine: roofline %s: model %s needs 0 < active params ≤ params", name, m.Name)
	case m.RoutedParams < 0 || m.RoutedParams > m.Params-m.AttnParams || (m.RoutedParams > 0 && (m.Experts < 1 || m.TopK < 1 || m.TopK > m.Experts)):
		return fmt.Errorf("engine: roofline %s: model %s needs routed params within the FFN and 1 ≤ top-k ≤ experts", name, m.Name)
	case m.AttnParams <= 0 || m.AttnParams >= m.ActiveParams:
		return fmt.Errorf("engine: roofline %s: model %s needs 0 < attention params < active params", name, m.Name)
	case m.Layers < 1 || m.Heads < 1 || m.KVHeads < 1 || m.HeadDim < 1 || m.DTypeBytes <= 0 || m.Hidden < 1:
		return fmt.Errorf("engine: roofline %s: model %s needs positive layers, hidden, heads, KV heads, head dim and dtype bytes", name, m.Name)
	case m.SlidingLayers < 0 || m.SlidingLayers >= m.Layers:
		return fmt.Errorf("engine: roofline %s: model %s needs 0 ≤ sliding layers < layers", name, m.Name)
	}
	return nil
}

// GPU describes an accelerator for the roofline: datasheet figures, then the achieved shares
// and overheads fitted to published SGLang runs (the presets' comments say which set fixed
// which).
type GPU struct {
	Name         string
	PeakFLOPS    float64 // dense BF16/FP16 FLOP/s
	PeakFLOPSFP8 float64 // dense FP8 FLOP/s (0: no FP8 tensor cores, the BF16 rate)
	PeakFLOPSFP4 float64 // dense FP4 FLOP/s (0: no FP4 tensor cores, the FP8 rate)
	HBMBandwidth float64 // bytes/s
	MemoryBytes  float64 // HBM capacity, bytes
	// NVLinkBandwidth is one GPU's scale-up bandwidth per direction, bytes/s (PCIe for parts
	// without NVLink); NVLinkDomain the GPUs it connects (8 in an HGX node, 72 in an NVL72
	// rack); NICBandwidth one GPU's scale-out bandwidth (400 Gb/s InfiniBand: 50 GB/s).
	NVLinkBandwidth float64
	NVLinkDomain    int
	NICBandwidth    float64

	ComputeEfficiency float64 // achieved share of the BF16 peak (GEMMs and attention), (0,1]
	// LowPrecisionEfficiency is the achieved share of the FP8/FP4 peaks, (0,1]; 0 → ComputeEfficiency.
	LowPrecisionEfficiency float64
	MemoryEfficiency       float64 // achieved share of HBMBandwidth in decode, (0,1]
	MemFractionStatic      float64 // share of HBM SGLang gives to weights + KV (mem_fraction_static), (0,1]
	PrefillOverhead        float64 // seconds per prefill step beyond the roofline (scheduler, launches)
	DecodeOverhead         float64 // the scheduler's CPU seconds per decode step (Profile.DecodeHost: hidden behind the GPU's step by the overlap scheduler)
	// MoELayerOverhead is the extra fixed time per MoE layer of a decode step (routing, expert
	// dispatch and combine kernels), seconds.
	MoELayerOverhead float64
	// PrefillExpertEfficiency is the achieved share of HBMBandwidth when a prefill step reads
	// the routed experts (0: MemoryEfficiency). A chunk of a few thousand tokens spreads them
	// over every expert, a few dozen rows each, so the grouped GEMMs read every expert's
	// weights in tiles sized for large batches. Fitted by code where held-out runs pin it
	// (B200, H200, H20: the TTFT of large MoE models at small batch, docs/validation.md); as
	// much a stand-in for the small-batch MoE prefill's other fixed costs as a bandwidth.
	// It applies to experts whose GEMMs run at FP8 or FP4 (block-FP8 DeepSeek and Kimi);
	// PrefillExpertEfficiencyBF16 to those computed at 16 bits (BF16 weights, or MXFP4 weights
	// dequantized: gpt-oss, Qwen3-MoE), another kernel family (SGLang's fused_moe_triton with
	// block-FP8 scales against triton_kernels' MXFP4 matmul_ogs or the BF16 fused_moe), whose
	// small-batch prefill the held-out sets put ~2.5× apart on the same GPU.
	PrefillExpertEfficiency     float64
	PrefillExpertEfficiencyBF16 float64
	// AllReduceLatency is the latency of one small tensor-parallel all-reduce (or all-gather)
	// among the GPUs of a node, seconds; EPNormalLatency and EPLowLatency that of one DeepEP
	// dispatch or combine in normal and low-latency mode.
	AllReduceLatency float64
	EPNormalLatency  float64
	EPLowLatency     float64
	// HostLinkBandwidth is the bytes/s one GPU reads host memory at (per direction), for
	// weight offloading (Parallelism.WeightOffload); 0: offloading not modelled on this GPU.
	HostLinkBandwidth float64
	// HostOverhead is the seconds a request spends outside the GPU's steps on a server of this
	// GPU's nodes (Profile.HostOverhead: HTTP, tokenizer and detokenizer processes, scheduler
	// polling), and PDOverhead the fixed cost of disaggregation per request (Profile.PDOverhead);
	// 0: DefaultHostOverhead, DefaultPDOverhead. Per GPU because the host is the node's: a GPU
	// generation comes in servers of its CPU generation, and the fit (sim/validate) chooses
	// them per GPU like the shares.
	HostOverhead float64
	PDOverhead   float64
}

// hostOverhead and pdOverhead are g's HostOverhead and PDOverhead, the defaults when unset.
func (g GPU) hostOverhead() float64 { return cmp.Or(g.HostOverhead, DefaultHostOverhead) }
func (g GPU) pdOverhead() float64   { return cmp.Or(g.PDOverhead, DefaultPDOverhead) }

func (g GPU) rate(p Precision) float64 {
	eff := g.LowPrecisionEfficiency
	if eff == 0 {
		eff = g.ComputeEfficiency
	}
	switch {
	case p == PrecisionFP4 && g.PeakFLOPSFP4 > 0:
		return g.PeakFLOPSFP4 * eff
	case (p == PrecisionFP4 || p == PrecisionFP8) && g.PeakFLOPSFP8 > 0:
		return g.PeakFLOPSFP8 * eff
	}
	return g.PeakFLOPS * g.ComputeEfficiency
}

// prefillExpertBW is the HBM bytes/s a prefill step reads m's routed experts at: the share
// of their GEMMs' format (PrefillExpertEfficiency for FP8/FP4 experts,
// PrefillExpertEfficiencyBF16 for experts computed at 16 bits), else the decode share.
func (g GPU) prefillExpertBW(m ModelCard) float64 {
	eff := g.PrefillExpertEfficiency
	if p := m.expertGEMM(); p != PrecisionFP8 && p != PrecisionFP4 {
		eff = g.PrefillExpertEfficiencyBF16
	}
	return g.HBMBandwidth * cmp.Or(eff, g.MemoryEfficiency)
}

func (g GPU) check(name string) error {
	ok := func(f float64) bool { return f > 0 && f <= 1 }
	switch {
	case g.PeakFLOPS <= 0 || g.HBMBandwidth <= 0 || g.MemoryBytes <= 0:
		return fmt.Errorf("engine: roofline %s: GPU %s needs positive peak FLOP/s, HBM bandwidth and memory", name, g.Name)
	case !ok(g.ComputeEfficiency) || !ok(g.MemoryEfficiency) || !ok(g.MemFractionStatic) ||
		(g.LowPrecisionEfficiency != 0 && !ok(g.LowPrecisionEfficiency)):
		return fmt.Errorf("engine: roofline %s: GPU %s efficiencies and memory fraction must be in (0,1]", name, g.Name)
	}
	return nil
}

// DefaultPDOverhead is the presets' PDOverhead (a GPU's PDOverhead when unset): 20 ms per
// request. An assumption in the range public SGLang PD measurements show (tens of ms added to
// TTFT by the bootstrap handshake, transfer setup and the router's two legs, on top of the
// transfer itself); sim/validate's fit chooses it per GPU (FitFields "PDOverhead", bounds
// 1-100 ms, this as its prior).
const DefaultPDOverhead = 0.020

// Communication constants of Build, each from a published measurement (change them here).
const (
	// CollectiveEfficiency is the achieved share of NVLink (or PCIe, or the NIC) bandwidth in
	// all-reduce, all-gather and DeepEP's NVLink legs: DeepEP's legacy table measures 153–158
	// GB/s intranode on H800s whose NVLink reaches ~160 GB/s (docs/legacy.md, "Normal kernels");
	// 0.8 leaves room for NCCL's ring on larger messages.
	CollectiveEfficiency = 0.8
	// DeepEPNormalNICShare: DeepEP normal kernels reach 43–58 GB/s "bottleneck bandwidth"
	// (RDMA) at EP16–64 on 400 Gb/s CX7 (~50 GB/s) NICs (docs/legacy.md): ~the line rate.
	DeepEPNormalNICShare = 0.9
	// DeepEPLowLatencyNICShare: low-latency kernels at 128 tokens per GPU reach 39–46 GB/s at
	// EP64–256 counting every top-8 copy (docs/legacy.md, "Low-latency kernels"), 7/8 of them
	// remote: 0.75 of the NIC per remote byte, a latency-bound point. Fixed at 0.8 by the decode
	// sets at 256–480 tokens per GPU: deepseek-v3-h100-pd-ep-96gpu (22,282 tok/s per node:
	// ×0.97 at 0.8, ×1.01 at 0.85, ×0.92 at 0.75) and kimi-k2-h200-pd-ep-128gpu (24k per decode
	// node: ×1.01 at 0.8, ×1.06 at 0.85, ×0.95 at 0.75). (0.9 was fitted to Kimi read as 32k per
	// decode node, a misreading of that blog corrected in its data file.)
	DeepEPLowLatencyNICShare = 0.8
	// DeepEPLowLatencyMaxTokens is SGLang's default low-latency buffer per GPU,
	// SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK = 128 (python/sglang/srt/layers/moe/
	// token_dispatcher/deepep.py); --deepep-mode auto steps above it per GPU are normal mode.
	DeepEPLowLatencyMaxTokens = 128
	// EPImbalance is the most loaded GPU's routed-expert work over the mean under EP at 32 GPUs
	// of 256 experts and above, applied to expert compute and dispatch/combine (smaller EP:
	// epImbalance). Fixed by deepseek-v3-h100-pd-ep-96gpu: the
	// blog's default EPLB run reaches 50,302 tok/s per node where its simulated perfect
	// balance reaches 59,337 (×1.18 on the whole step; the MoE part is about two thirds).
	EPImbalance = 1.25
	// OffloadKVShare is the share of the static memory (mem_fraction_static) weight offloading
	// leaves for the KV pool: enough for a prefill instance's chunks and the KV it holds until
	// the decode side takes it. Assumed: the GB200 part II blog does not say how many layers it
	// offloaded; at 2,000-token prompts the prefill rate does not depend on it while the copies
	// hide behind the step's compute (deepseek-gb200-nvl72-pd-ep-part2 prefill).
	OffloadKVShare = 0.1
	// TwoBatchOverlapLayerOverhead is the seconds per layer that splitting a step into two
	// micro-batches costs (two launches of each kernel, smaller GEMMs; two_batch_overlap.py).
	// Assumed: ~1 % of a 16k-token prefill step, ~10 % of a 256-batch decode step.
	TwoBatchOverlapLayerOverhead = 100e-6
)

// Model cards (treat as read-only). Sources: the models' Hugging Face config.json
// (num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim or hidden/heads,
// hidden_size, expert counts and sizes) and model cards for parameter counts. AttnParams is Σ
// over layers of the Q, K, V and O projections, computed from config.json.
var (
	// Llama3Dense8B: meta-llama/Llama-3.1-8B config.json (same shape as Llama 3 8B): 32 layers,
	// 32 heads, 8 KV heads, hidden 4096 → head dim 128; 8.03 B parameters (model card);
	// attention 32·(4096·4096·2 + 4096·1024·2) = 1.34 B.
	Llama3Dense8B = ModelCard{Name: "llama3-8b", Architecture: "LlamaForCausalLM", Vocab: 128256,
		Aliases: []string{"meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"},
		Params:  8.03e9, ActiveParams: 8.03e9, AttnParams: 1.34e9, Hidden: 4096, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128, DTypeBytes: 2}
	// Llama3Dense70B: meta-llama/Llama-3.1-70B config.json: 80 layers, 64 heads, 8 KV heads,
	// hidden 8192 → head dim 128; 70.6 B parameters (model card); attention
	// 80·(8192·8192·2 + 8192·1024·2) = 12.1 B.
	Llama3Dense70B = ModelCard{Name: "llama3-70b", Architecture: "LlamaForCausalLM", Vocab: 128256,
		Aliases: []string{"meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B-Instruct",
			"meta-llama/Llama-3.3-70B-Instruct"}, // 3.3: the same shapes and weights format
		Params: 70.6e9, ActiveParams: 70.6e9, AttnParams: 12.1e9, Hidden: 8192, Layers: 80, Heads: 64, KVHeads: 8, HeadDim: 128, DTypeBytes: 2}
	// Qwen3MoE30BA3B: Qwen/Qwen3-30B-A3B config.json: 48 layers (all MoE), 32 heads, 4 KV heads,
	// head_dim 128, hidden 2048, 128 experts with 8 active; 30.5 B total, 3.3 B activated
	// parameters (model card); attention 48·(2048·4096·2 + 2048·512·2) = 0.906 B.
	// Routed experts: 48 layers · 128 experts · 3·2048·768 (moe_intermediate_size 768) = 29.0 B.
	Qwen3MoE30BA3B = ModelCard{Name: "qwen3-30b-a3b", Architecture: "Qwen3MoeForCausalLM", Vocab: 151936, Aliases: []string{"Qwen/Qwen3-30B-A3B"},
		Params: 30.5e9, ActiveParams: 3.3e9, AttnParams: 0.906e9, Hidden: 2048, Layers: 48, MoELayers: 48,
		RoutedParams: 29.0e9, Experts: 128, TopK: 8, Heads: 32, KVHeads: 4, HeadDim: 128, DTypeBytes: 2}
	// DeepSeekV3: deepseek-ai/DeepSeek-V3 config.json: 61 layers (58 MoE), 128 heads, hidden
	// 7168, MLA with kv_lora_rank 512 + qk_rope_head_dim 64 (the 576-wide latent KV is cached:
	// KVHeads 1 × HeadDim 288 × 2 reproduces 576 elements per layer, in BF16), q_lora_rank 1536;
	// block-FP8 weights and GEMMs (DeepGEMM); 671 B total, 37 B activated (model card).
	// Attention per layer 7168·1536 + 1536·128·192 + 7168·576 + 512·128·256 + 128·128·7168 ≈
	// 187 M → 11.4 B; absorbed MLA decode FLOPs per pair and layer 2·128·(576 + 512), prefill
	// (MHA over decompressed K/V, qk 192, v 128) 2·128·(192 + 128). Routed experts: 58 layers ·
	// 256 experts · 3·7168·2048 (moe_intermediate_size 2048) = 654 B, 8 per token. This is the
	// GB200 part II blog's "high precision": BF16 attention (KV) + FP8 MoE.
	DeepSeekV3 = ModelCard{Name: "deepseek-v3", Architecture: "DeepseekV3ForCausalLM", Vocab: 129280, Aliases: []string{"deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1",
		"deepseek-ai/DeepSeek-V3-0324", "deepseek-ai/DeepSeek-R1-0528"}, // later checkpoints of the same config.json
		Params: 671e9, ActiveParams: 37e9, AttnParams: 11.4e9, Hidden: 7168, Layers: 61, MoELayers: 58,
		RoutedParams: 654e9, Experts: 256, TopK: 8, Heads: 128, KVHeads: 1, HeadDim: 288,
		AttnFLOPsPerPair: 2 * 128 * (576 + 512), PrefillAttnFLOPsPerPair: 2 * 128 * (192 + 128),
		DTypeBytes: 1, KVDTypeBytes: 2, GEMM: PrecisionFP8}
	// DeepSeekV3FP4: DeepSeekV3 as the GB200 part II blog's "low precision" runs it: FP8 KV
	// and attention, NVFP4 routed experts (4-bit values + one FP8 scale per 16: 0.5625 bytes)
	// and NVFP4 attention output projection ("FP8 for attention and NVFP4 for MoE and output
	// projection GEMM", End-to-end Performance): o_proj 61·128·128·7168 = 7.2 B parameters.
	DeepSeekV3FP4 = ModelCard{Name: "deepseek-v3-fp8kv-nvfp4moe", Architecture: "DeepseekV3ForCausalLM", Vocab: 129280, LowPrecisionAttnParams: 7.2e9,
		Params: 671e9, ActiveParams: 37e9, AttnParams: 11.4e9, Hidden: 7168, Layers: 61, MoELayers: 58,
		RoutedParams: 654e9, Experts: 256, TopK: 8, Heads: 128, KVHeads: 1, HeadDim: 288,
		AttnFLOPsPerPair: 2 * 128 * (576 + 512), PrefillAttnFLOPsPerPair: 2 * 128 * (192 + 128),
		DTypeBytes: 1, ExpertDTypeBytes: 0.5625, KVDTypeBytes: 1, GEMM: PrecisionFP8, ExpertGEMM: PrecisionFP4}
	// KimiK2: moonshotai/Kimi-K2-Instruct config.json (DeepseekV3ForCausalLM): 61 layers,
	// first_k_dense_replace 1 → 60 MoE layers, hidden 7168, 64 heads, MLA (kv_lora_rank 512,
	// q_lora_rank 1536, qk_rope 64, qk_nope 128, v_head 128), 384 routed experts top-8 of
	// moe_intermediate_size 2048 plus one shared, vocab 163,840; block-FP8 weights. Attention
	// per layer 7168·1536 + 1536·64·192 + 7168·576 + 512·64·256 + 64·128·7168 ≈ 101 M → 6.2 B;
	// routed 60·384·3·7168·2048 = 1,015 B; total ≈ 1.03 T, active ≈ 32.6 B (model card: 1 T /
	// 32 B).
	KimiK2 = ModelCard{Name: "kimi-k2", Architecture: "DeepseekV3ForCausalLM", Vocab: 163840, Aliases: []string{"moonshotai/Kimi-K2-Instruct"},
		Params: 1.03e12, ActiveParams: 32.6e9, AttnParams: 6.2e9, Hidden: 7168, Layers: 61, MoELayers: 60,
		RoutedParams: 1015e9, Experts: 384, TopK: 8, Heads: 64, KVHeads: 1, HeadDim: 288,
		AttnFLOPsPerPair: 2 * 64 * (576 + 512), PrefillAttnFLOPsPerPair: 2 * 64 * (192 + 128),
		DTypeBytes: 1, KVDTypeBytes: 2, GEMM: PrecisionFP8}
	// Qwen25Dense7B: Qwen/Qwen2.5-7B-Instruct config.json: 28 layers, 28 heads, 4 KV heads,
	// hidden 3584 → head dim 128, vocab 152,064 untied; 7.61 B parameters (model card);
	// attention 28·(3584·3584·2 + 3584·512·2) = 0.822 B. BF16.
	Qwen25Dense7B = ModelCard{Name: "qwen2.5-7b", Architecture: "Qwen2ForCausalLM", Vocab: 152064, Aliases: []string{"Qwen/Qwen2.5-7B-Instruct"},
		Params: 7.61e9, ActiveParams: 7.61e9, AttnParams: 0.822e9, Hidden: 3584, Layers: 28, Heads: 28, KVHeads: 4, HeadDim: 128, DTypeBytes: 2}
	// Qwen25Dense7BGPTQ: Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4: the 6.53 B non-embedding weights
	// in INT4 with an FP16 scale and zero per group of 128 (~0.53 bytes), embeddings and
	// lm_head (1.09 B) in FP16: 5.6 GB, 0.74 bytes per parameter on average. GEMMs dequantize to
	// FP16 (bf16 rate); KV in FP16.
	Qwen25Dense7BGPTQ = ModelCard{Name: "qwen2.5-7b-gptq-int4", Architecture: "Qwen2ForCausalLM", Vocab: 152064, Aliases: []string{"Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4"},
		Params: 7.61e9, ActiveParams: 7.61e9, AttnParams: 0.822e9, Hidden: 3584, Layers: 28, Heads: 28, KVHeads: 4, HeadDim: 128,
		DTypeBytes: 0.74, KVDTypeBytes: 2}
	// GPTOSS120B: openai/gpt-oss-120b config.json: 36 layers (all MoE), hidden 2880, 64 heads of
	// 64, 8 KV heads, 128 experts top-4 (intermediate 2880: 3·2880·2880 = 24.9 M each),
	// sliding window 128 on every other layer, vocab 201,088. Routed 36·128·24.9 M = 114.7 B in
	// MXFP4 (4-bit values + one 8-bit scale per 32: 0.53 bytes), the rest BF16; attention
	// 36·(2880·4096·2 + 2880·512·2) = 0.955 B; total ≈ 117 B, active ≈ 5.1 B (model card).
	// Expert GEMMs at the BF16 rate (MXFP4 weights, 16-bit activations).
	GPTOSS120B = ModelCard{Name: "gpt-oss-120b", Architecture: "GptOssForCausalLM", Vocab: 201088, Aliases: []string{"openai/gpt-oss-120b"},
		Params: 116.8e9, ActiveParams: 5.1e9, AttnParams: 0.955e9, Hidden: 2880, Layers: 36, MoELayers: 36,
		RoutedParams: 114.7e9, Experts: 128, TopK: 4, Heads: 64, KVHeads: 8, HeadDim: 64,
		SlidingLayers: 18, SlidingWindow: 128, DTypeBytes: 2, ExpertDTypeBytes: 0.53}
)

// GPUs (treat as read-only). Datasheet figures: NVIDIA datasheets (dense Tensor Core FLOP/s,
// i.e. half the "with sparsity" figure; HBM capacity and bandwidth; NVLink bandwidth per
// direction, half the bidirectional figure). The achieved shares and overheads say beside each
// which published set fixed them (sim/testdata/published); "assumed" ones no set pins yet.
// The constants the headline fit chooses (MoELayerOverhead, PrefillExpertEfficiency,
// PrefillExpertEfficiencyBF16) are not typed here: each card passes through fitted, generated
// in fitted.go with the fit's inputs (go test ./sim/validate -run TestHeldOutCrossValidated -update).
var (
	// A100SXM: A100 SXM4 80 GB: 312 TFLOP/s BF16 dense, no FP8, 2.039 TB/s HBM2e, NVLink 600 GB/s
	// bidirectional.
	A100SXM = fitted(GPU{Name: "a100-sxm", PeakFLOPS: 312e12, HBMBandwidth: 2.039e12,
		MemoryBytes:     81920 << 20, // the 81,920 MiB the device reports (nvidia-smi, torch.cuda.mem_get_info), which SGLang sizes from
		NVLinkBandwidth: 300e9, NVLinkDomain: 8, NICBandwidth: 25e9,
		ComputeEfficiency: 0.5, // assumed (as H100's, fixed by llama31-8b-h100-random8k-pr1060)
		MemoryEfficiency:  0.8, // llama31-8b-a100-sharegpt-v030 median ITL 11.93 ms at 4 req/s, with DecodeOverhead
		MemFractionStatic: 0.88, PrefillOverhead: 0.002,
		DecodeOverhead:   0.0019, // llama31-8b-a100-sharegpt-v030: 11.93 ms − 9.85 ms weights − 0.2 ms KV at batch ~6
		MoELayerOverhead: 40e-6, AllReduceLatency: 40e-6, EPNormalLatency: 60e-6, EPLowLatency: 15e-6})
	// H100SXM: H100 SXM5 80 GB: 989 TFLOP/s BF16 and 1,979 FP8 dense, 3.35 TB/s HBM3, NVLink
	// 900 GB/s bidirectional, one 400 Gb/s NIC per GPU.
	H100SXM = fitted(GPU{Name: "h100-sxm", PeakFLOPS: 989e12, PeakFLOPSFP8: 1979e12, HBMBandwidth: 3.35e12,
		MemoryBytes:     81559 << 20, // the 81,559 MiB the device reports (nvidia-smi, torch.cuda.mem_get_info), which SGLang sizes from
		NVLinkBandwidth: 450e9, NVLinkDomain: 8, NICBandwidth: 50e9,
		ComputeEfficiency: 0.5, // llama31-8b-h100-random8k-pr1060: 27,670 input tok/s at 8,192-token steps (Triton attention folded in)
		// LowPrecisionEfficiency (DeepGEMM FP8 + the step's other kernels): deepseek-v3-h100-pd-ep-96gpu
		// prefill (1K/2K/4K ×0.94/0.96/0.98) jointly with kimi-k2-h200-pd-ep-128gpu prefill (56k
		// tok/s per prefill node ×1.08; the H200 has the H100's compute die). 0.33, fitted to the
		// DeepSeek set alone, put Kimi at ×1.18.
		LowPrecisionEfficiency: 0.30,
		MemoryEfficiency:       0.8, // assumed as A100's; with AllReduceLatency it meets llama31-70b-h100-tp4 ITL
		MemFractionStatic:      0.88, PrefillOverhead: 0.002,
		DecodeOverhead:   0.0019, // as A100 (the scheduler's per-step CPU time; same SGLang)
		AllReduceLatency: 40e-6,  // llama31-70b-h100-tp4-sharegpt-v030: median ITL 21.67 ms ≈ 13.2 weights + 1.9 overhead + 0.3 KV + 160 all-reduces
		EPNormalLatency:  60e-6,  // assumed: DeepEP normal waits on a CPU-side count per dispatch (docs/legacy.md)
		EPLowLatency:     15e-6}) // assumed: DeepEP LL 77 µs at EP8 is mostly bandwidth (docs/legacy.md)
	// H200SXM: H200 SXM 141 GB: 989 TFLOP/s BF16 and 1,979 FP8 dense, 4.8 TB/s HBM3e, NVLink
	// 900 GB/s bidirectional. Efficiencies as H100's (same compute die); the FP8 share is fitted
	// on both (see H100SXM), kimi-k2-h200-pd-ep-128gpu being this GPU's set.
	H200SXM = fitted(GPU{Name: "h200-sxm", PeakFLOPS: 989e12, PeakFLOPSFP8: 1979e12, HBMBandwidth: 4.8e12, MemoryBytes: 141e9,
		NVLinkBandwidth: 450e9, NVLinkDomain: 8, NICBandwidth: 50e9,
		ComputeEfficiency: 0.5, LowPrecisionEfficiency: 0.30, MemoryEfficiency: 0.8, MemFractionStatic: 0.88, PrefillOverhead: 0.002, DecodeOverhead: 0.0019,
		AllReduceLatency: 40e-6, EPNormalLatency: 60e-6, EPLowLatency: 15e-6})
	// (MoELayerOverhead and the prefill expert-read shares: fitted.go, the fit of 26 H200 sets:
	// DeepSeek-R1/V3 TP8 (GPUStack's six, InferenceX's, the v0.4.1 DP-attention one) pin the
	// FP8 share and the MoE layer time, the nine dstack gpt-oss PD sets the BF16 share; the
	// other eight are dense Llama (DataCrunch).)
	// H20: H20 96 GB: 148 TFLOP/s BF16 and 296 FP8 dense, 4.0 TB/s HBM3, NVLink 900 GB/s
	// bidirectional. Efficiencies as H100's (assumed).
	H20 = fitted(GPU{Name: "h20", PeakFLOPS: 148e12, PeakFLOPSFP8: 296e12, HBMBandwidth: 4.0e12, MemoryBytes: 96e9,
		NVLinkBandwidth: 450e9, NVLinkDomain: 8, NICBandwidth: 50e9,
		ComputeEfficiency: 0.5, LowPrecisionEfficiency: 0.30, MemoryEfficiency: 0.8, MemFractionStatic: 0.88, PrefillOverhead: 0.002, DecodeOverhead: 0.0019,
		AllReduceLatency: 40e-6, EPNormalLatency: 60e-6, EPLowLatency: 15e-6})
	// (MoELayerOverhead and the prefill expert-read shares: fitted.go, from Qwen3-30B-A3B at
	// batch 1 and DeepSeek-V3 TP8; the FP8 share was 0.146 while MoELayerOverhead was 40 µs:
	// it stood in for the decode steps a prompt waits behind.)
	// A10: A10 24 GB (PCIe): 125 TFLOP/s FP16 dense, no FP8, 600 GB/s GDDR6, no NVLink: PCIe
	// Gen4 x16 (~32 GB/s per direction) between GPUs. Memory efficiency as A100's (assumed).
	A10 = fitted(GPU{Name: "a10", PeakFLOPS: 125e12, HBMBandwidth: 600e9, MemoryBytes: 24e9,
		NVLinkBandwidth: 32e9, NVLinkDomain: 8, NICBandwidth: 12.5e9,
		// qwen25-7b-gptq-a10-pd-1p1d-pr4880: mean TTFT 733 ms at 1 req/s on ~6,600-token prompts
		// (output 407.6 of 512 → lengths ~0.6–1× of 8,192) is one prefill S plus M/G/1 queueing
		// λE[S²]/2(1−λE[S]) plus transfer: S ≈ 0.45 s, which the TP4 all-reduce volume over
		// PCIe (~24 µs/token) leaves ~0.7 of the FP16 peak for the GEMMs. Profile-level
		// estimate; the end-to-end fit is `router sim validate`'s.
		ComputeEfficiency: 0.7, MemoryEfficiency: 0.8, MemFractionStatic: 0.88, PrefillOverhead: 0.002, DecodeOverhead: 0.0019,
		MoELayerOverhead: 40e-6,
		AllReduceLatency: 60e-6, // qwen25-7b-gptq-a10-pd-1p1d-pr4880: mean ITL 7.23 ms ≈ 2.9 weights + ~1 KV + 56 all-reduces over PCIe (25 µs until the overlap scheduler hid DecodeOverhead: Profile.DecodeHost)
		EPNormalLatency:  60e-6, EPLowLatency: 15e-6})
	// B200: HGX B200 180 GB: 2.25 PFLOP/s BF16, 4.5 FP8, 9 FP4 dense, 7.7–8 TB/s HBM3e, NVLink 5
	// 1.8 TB/s bidirectional (8 per node), 400 Gb/s NIC. Compute efficiencies as GB200's (the same
	// Blackwell die and SGLang kernels; fitted by the GB200 sets): with H100's 0.5 / 0.33
	// gpt-oss-120b-b200-dp4-ep4-pr9359 ran ×1.47, with these ×1.26 (what else that set lacks: its
	// notes and the fit helper's report). Memory efficiency as H100's (assumed).
	B200 = fitted(GPU{Name: "b200", PeakFLOPS: 2.25e15, PeakFLOPSFP8: 4.5e15, PeakFLOPSFP4: 9e15, HBMBandwidth: 8e12, MemoryBytes: 180e9,
		NVLinkBandwidth: 900e9, NVLinkDomain: 8, NICBandwidth: 50e9,
		ComputeEfficiency: 0.32, LowPrecisionEfficiency: 0.29, MemoryEfficiency: 0.8, MemFractionStatic: 0.88, PrefillOverhead: 0.002, DecodeOverhead: 0.0019,
		AllReduceLatency: 40e-6, EPNormalLatency: 60e-6, EPLowLatency: 15e-6})
	// (MoELayerOverhead and the prefill expert-read shares: fitted.go, from DeepSeek-R1 TP8
	// (9.2 ms a step at concurrency 1) and Kimi-K2 for FP8, gpt-oss at TP8 for BF16, weakly
	// pinned.)
	// GB200: GB200 NVL72, per GPU: 186 GB HBM3e, 8 TB/s, 2.5 PFLOP/s BF16, 5 FP8, 10 FP4 dense,
	// NVLink 5 1.8 TB/s bidirectional across the 72-GPU domain. ComputeEfficiency 0.32 and
	// LowPrecisionEfficiency 0.29 from the GB200 decode sets, compute-bound at 931–1408 requests
	// per rank: deepseek-gb200-nvl72-pd-ep-decode-part1 (7,583 tok/s/GPU, ×1.07) and
	// deepseek-gb200-nvl72-pd-ep-part2 high precision (9,087, ×0.90) are the same setup three
	// months of kernels apart, so one value sits between them; part II low precision (13,386,
	// ×0.90) sets the FP8/FP4 share, and 2·0.29/0.32 = 1.8 is part II's "attention is 1.8x
	// faster" for FP8 over BF16 attention. Part I: "many kernels have yet to fully saturate the
	// GB200's memory bandwidth or computational capabilities". Memory efficiency as H100's.
	GB200 = fitted(GPU{Name: "gb200", PeakFLOPS: 2.5e15, PeakFLOPSFP8: 5e15, PeakFLOPSFP4: 10e15, HBMBandwidth: 8e12, MemoryBytes: 186e9,
		NVLinkBandwidth: 900e9, NVLinkDomain: 72, NICBandwidth: 50e9,
		HostLinkBandwidth: 450e9, // NVLink-C2C to the Grace CPU: "900GB/s, bidirectional" (GB200 part II blog)
		ComputeEfficiency: 0.32, LowPrecisionEfficiency: 0.29, MemoryEfficiency: 0.8, MemFractionStatic: 0.88, PrefillOverhead: 0.002, DecodeOverhead: 0.0019,
		AllReduceLatency: 40e-6, EPNormalLatency: 60e-6, EPLowLatency: 15e-6}) // MoELayerOverhead: fitted.go
)
