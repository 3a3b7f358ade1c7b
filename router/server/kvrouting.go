package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/kvevents"
	"github.com/pdrouter/pdrouter/router/kvindex"
	"github.com/pdrouter/pdrouter/router/tokenize"
	"github.com/pdrouter/pdrouter/router/wire"
)

// kvPendingTTL is how long a request routed to a target counts as cached there before the
// target's own events say so: a long prompt's prefill plus one publish interval (SGLang
// publishes after every prefill batch).
const kvPendingTTL = 2 * time.Second

// kvRouting is cache_aware's precise mode in serve: the KV-event index the policy consults,
// the subscriber feeding it from every worker that publishes, and the tokenizer giving each
// request its prompt ids (SGLang's own router keeps the policy name cache_aware and switches
// per worker, lightseekorg/smg docs/getting-started/kv-events-cache-aware.md).
type kvRouting struct {
	s     *Server
	tok   *tokenize.Tokenizer // nil: only requests carrying token ids are routed on the index
	ix    *kvindex.Index
	sub   *kvevents.Subscriber
	cfg   *kvevents.Config // --kv-events-config, for workers that do not advertise kv_events
	roles []router.Role    // the roles whose cache_aware policy consults ix

	// followed counts workers with at least one subscribed rank (mirrors the workers map,
	// read without the lock on the hot path): while it is 0 no target can be fresh, so
	// requests are not tokenized for an index that cannot match them.
	followed atomic.Int32

	mu      sync.Mutex
	ctx     context.Context             // Start's; nil before Start
	started time.Time                   // when Start ran: the warm-up window starts there
	page    int                         // page size the index hashes at
	workers map[string]*kvWorker        // by URL
	pending []func(ctx context.Context) // attaches queued before Start
}

// kvWorker is one worker's subscription state.
type kvWorker struct {
	cancel  context.CancelFunc
	targets []string
	settled bool // attach finished: subscribed, or found the worker publishes nothing
	counted bool // in kvRouting.followed
}

// unfollowLocked takes a replaced or removed worker out of the followed count (k.mu held).
func (k *kvRouting) unfollowLocked(w *kvWorker) {
	if w.counted {
		w.counted = false
		k.followed.Add(-1)
	}
}

// newKVRouting returns nil when KV-event routing is off: --kv-events off, or no role routes
// with cache_aware.
func newKVRouting(s *Server) (*kvRouting, error) {
	cfg := s.cfg
	if cfg.KVEvents == "off" {
		return nil, nil
	}
	k := &kvRouting{s: s, page: cfg.BlockSize, workers: map[string]*kvWorker{}}
	first := []router.Role{router.Regular}
	if s.r.PD() {
		first = []router.Role{router.Prefill, router.Decode}
	}
	for _, role := range first {
		if p := s.r.Policy(role); p != nil && (p.Name() == router.PolicyCacheAware || p.Name() == router.PolicyPredictedLatency && role != router.Decode) {
			k.roles = append(k.roles, role)
		}
	}
	if len(k.roles) == 0 {
		return nil, nil
	}
	if cfg.KVEventsConfig != "" {
		c, err := kvevents.ParseConfig(cfg.KVEventsConfig)
		if err != nil {
			return nil, router.SettingErrorf("kv_events_config", "--kv-events-config: %v", err)
		}
		k.cfg = &c
	}
	path := cfg.TokenizerPath
	if path == "" {
		path = cfg.ModelPath
	}
	if path != "" {
		t, err := tokenize.Load(path, cfg.ChatTemplate)
		if err != nil {
			flag := "tokenizer_path"
			if cfg.TokenizerPath == "" {
				flag = "model_path"
			}
			return nil, router.SettingErrorf(flag, "--%s %s: %v", strings.ReplaceAll(flag, "_", "-"), path, err)
		}
		k.tok = t
	} else if cfg.ChatTemplate != "" {
		return nil, router.SettingErrorf("chat_template", "--chat-template needs --tokenizer-path or --model-path")
	}
	k.ix = kvindex.New(kvindex.Config{PendingTTL: kvPendingTTL})
	k.sub = kvevents.New(k.ix, kvevents.Options{Registerer: s.reg, Logger: s.log})
	for _, role := range k.roles {
		if err := s.r.UseKVIndex(role, k.ix, k.page); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// start runs the attaches queued before Start under ctx.
func (k *kvRouting) start(ctx context.Context) {
	k.mu.Lock()
	k.ctx, k.started = ctx, time.Now()
	queued := k.pending
	k.pending = nil
	k.mu.Unlock()
	for _, f := range queued {
		go f(ctx)
	}
	context.AfterFunc(ctx, k.sub.Close)
}

// tokens returns the request's prompt ids for the index, nil when the router cannot know
// them (a batch; text without a tokenizer; a body the worker will reject anyway).
func (k *kvRouting) tokens(b *wire.Body) []uint32 {
	if b.Batch > 0 || k.followed.Load() == 0 {
		// A batch, or no worker whose events the index follows: every target routes on the
		// approximate tree, and tokenizing (~0.5 ms per 8k tokens) would buy nothing.
		return nil
	}
	if k.tok == nil && !tokenIDsGiven(b) {
		// Nothing to route on, and decoding the body to learn that cost twice its size.
		return nil
	}
	api := tokenize.Generate
	switch b.Route {
	case wire.Chat:
		api = tokenize.Chat
	case wire.Completions:
		api = tokenize.Completions
	}
	ids, err := k.tok.PromptIDs(nil, api, b.Raw)
	if err != nil {
		if !errors.Is(err, tokenize.ErrNoPrompt) {
			k.s.log.Debug("KV-event routing: no prompt ids for the request; routed on the approximate tree", "error", err)
		}
		return nil
	}
	return ids
}

// tokenIDsGiven reports whether a body carries its prompt as token ids (generate input_ids, a
// completions prompt list): the only prompts the index can route on without a tokenizer.
func tokenIDsGiven(b *wire.Body) bool {
	field := "input_ids"
	switch b.Route {
	case wire.Chat:
		return false
	case wire.Completions:
		field = "prompt"
	}
	v, ok := b.Field(field)
	return ok && len(v) > 0 && v[0] == '['
}

// workerAdded subscribes to a new worker's events, in the background (the router calls
// workerEvent under its lock). Only workers of a role that routes on the index are followed.
func (k *kvRouting) workerAdded(url string, role router.Role, dpSize int) {
	if !k.follows(role) {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if old := k.workers[url]; old != nil {
		if old.cancel != nil {
			old.cancel()
		}
		k.unfollowLocked(old)
	}
	w := &kvWorker{}
	k.workers[url] = w
	attach := func(ctx context.Context) {
		ctx, cancel := context.WithCancel(ctx)
		k.mu.Lock()
		if k.workers[url] != w { // removed (or re-added) before the attach ran
			k.mu.Unlock()
			cancel()
			return
		}
		w.cancel = cancel
		k.mu.Unlock()
		k.attach(ctx, w, url, role, dpSize)
	}
	if k.ctx == nil {
		k.pending = append(k.pending, attach)
		return
	}
	go attach(k.ctx)
}

func (k *kvRouting) follows(role router.Role) bool {
	for _, r := range k.roles {
		if r == role {
			return true
		}
	}
	return false
}

// workerGone stops a removed worker's subscriptions and forgets its blocks.
func (k *kvRouting) workerGone(url string) {
	k.mu.Lock()
	w := k.workers[url]
	delete(k.workers, url)
	if w != nil {
		k.unfollowLocked(w)
	}
	k.mu.Unlock()
	if w == nil {
		return
	}
	if w.cancel != nil {
		w.cancel()
	}
	// Remove waits for the stream goroutines: not under the router's lock.
	go func() {
		k.mu.Lock()
		targets := w.targets
		k.mu.Unlock()
		for _, t := range targets {
			k.sub.Remove(t)
		}
	}()
}

// attach reads the worker's /get_server_info for where it publishes (its kv_events block, or
// --kv-events-config) and the page size, retrying while the worker starts, then subscribes to
// every rank.
func (k *kvRouting) attach(ctx context.Context, w *kvWorker, url string, role router.Role, dpSize int) {
	log := k.s.log.With("worker", router.RedactURL(url), "role", role.String())
	var eps []kvevents.Endpoint
	var page int
	wait := time.Second
	for attempt := 1; ; attempt++ {
		var err error
		eps, page, err = k.endpoints(ctx, url, dpSize)
		if err == nil {
			break
		}
		if errors.Is(err, kvevents.ErrDisabled) {
			log.Info("worker publishes no KV events: cache_aware routes to it on the approximate tree", "reason", err)
			k.mu.Lock()
			w.settled = true
			k.mu.Unlock()
			return
		}
		if attempt == 1 || attempt%10 == 0 {
			log.Warn("KV events: cannot read where the worker publishes; retrying", "error", err, "attempt", attempt)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
	if page > 0 {
		k.setPage(page, log)
	}
	var added []string
	for _, ep := range eps {
		if err := k.sub.Add(ep); err != nil {
			log.Warn("KV events: subscription failed", "target", router.RedactURL(ep.Target), "error", err)
			continue
		}
		added = append(added, ep.Target)
	}
	k.mu.Lock()
	gone := k.workers[url] != w
	if !gone {
		w.targets, w.settled = added, true
		if len(added) > 0 {
			w.counted = true
			k.followed.Add(1)
		}
	}
	k.mu.Unlock()
	if gone { // removed while we subscribed
		for _, t := range added {
			k.sub.Remove(t)
		}
		return
	}
	log.Debug("KV events: worker followed", "ranks", len(added), "page_size", k.currentPage())
}

// endpoints returns where the worker publishes and its page size (0: not told).
func (k *kvRouting) endpoints(ctx context.Context, url string, dpSize int) ([]kvevents.Endpoint, int, error) {
	body, err := k.s.probe.raw(ctx, url)
	if err != nil {
		return nil, 0, err
	}
	si, err := kvevents.ParseServerInfo(body)
	if err != nil {
		return nil, 0, err
	}
	page := 0
	var eps []kvevents.Endpoint
	switch {
	case si.KVEvents != nil:
		page = si.KVEvents.BlockSize
		eps, err = si.Endpoints(url, dpSize)
	case k.cfg != nil:
		eps, err = k.cfg.Endpoints(url, dpSize)
	default:
		return nil, 0, fmt.Errorf("/get_server_info has no kv_events block and --kv-events-config is not given: %w", kvevents.ErrDisabled)
	}
	if page == 0 {
		page = pageSizeOf(body)
	}
	return eps, page, err
}

// setPage switches the index's page size to what a worker reports (--block-size is only the
// default until one does).
func (k *kvRouting) setPage(page int, log interface{ Warn(string, ...any) }) {
	k.mu.Lock()
	old := k.page
	k.page = page
	k.mu.Unlock()
	if page == old {
		return
	}
	log.Warn("KV events: the worker's page size differs from --block-size; hashing requests at the worker's",
		"page_size", page, "block_size", old)
	for _, role := range k.roles {
		if err := k.s.r.UseKVIndex(role, k.ix, page); err != nil {
			log.Warn("KV events: cannot switch the page size", "error", err)
		}
	}
}

func (k *kvRouting) currentPage() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.page
}

// pageSizeOf reads server_args' page_size from a /get_server_info body (0 when absent).
func pageSizeOf(body []byte) int {
	var si struct {
		PageSize int `json:"page_size"`
	}
	if json.Unmarshal(body, &si) != nil {
		return 0
	}
	return si.PageSize
}

// kvReadiness is /readiness's kv_events block.
type kvReadiness struct {
	Subscriptions int  `json:"subscriptions"` // (worker, rank) streams followed
	Connected     int  `json:"connected"`
	HeardFrom     int  `json:"heard_from"`  // streams that delivered a batch (or a replay) since they started
	Stale         int  `json:"stale"`       // routed on the approximate tree until rebuilt
	Discovering   int  `json:"discovering"` // workers whose publishers are still being looked up
	WarmingUp     bool `json:"warming_up"`  // readiness fails: a worker or stream not heard from yet, inside the warm-up window
	// WarmupLeftSecs is what remains of --kv-events-warmup-secs while warming up.
	WarmupLeftSecs float64 `json:"warmup_left_secs,omitempty"`
}

// readiness says whether the index has caught up: every followed stream heard from, or the
// warm-up window (--kv-events-warmup-secs after Start) over. A replica added beside others
// fails readiness until then, so a Kubernetes Service sends it nothing while its index only
// knows blocks stored after it subscribed (events carry changes, not the cache's state: a
// publisher's replay buffer gives back only its last buffer_steps batches).
func (k *kvRouting) readiness(now time.Time) kvReadiness {
	var r kvReadiness
	for _, st := range k.sub.Status() {
		r.Subscriptions++
		if st.Connected {
			r.Connected++
		}
		if st.LastSeq >= 0 {
			r.HeardFrom++
		}
		if st.Stale {
			r.Stale++
		}
	}
	k.mu.Lock()
	started := k.started
	for _, w := range k.workers {
		if !w.settled {
			r.Discovering++
		}
	}
	k.mu.Unlock()
	window := time.Duration(k.s.cfg.KVEventsWarmupSecs) * time.Second
	behind := r.Discovering > 0 || r.HeardFrom < r.Subscriptions
	if left := window - now.Sub(started); !started.IsZero() && left > 0 && behind {
		r.WarmingUp, r.WarmupLeftSecs = true, left.Seconds()
	}
	return r
}
