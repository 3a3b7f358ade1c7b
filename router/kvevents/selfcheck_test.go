package kvevents

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"

	"github.com/pdrouter/pdrouter/router/kvindex"
)

// The hash self-check recomputes stored blocks from their token ids: a chain's first event
// (no parent), then children whose parent it verified; a worker hashing differently is
// counted as mismatches; a parent it never saw cannot be continued and is not counted.
func TestHashSelfCheck(t *testing.T) {
	s := newSubscriber(newFakeIndex(), Options{})
	st := newStream(s, Endpoint{Target: "http://w:1", Pub: "tcp://127.0.0.1:1"})
	defer st.cancel()
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	hs := kvindex.AppendBlockHashes(nil, toks, 4, "")
	count := func(result string) float64 {
		return testutil.ToFloat64(s.m.hashChecks.WithLabelValues(st.label, result))
	}

	st.selfCheck(kvindex.Event{Kind: kvindex.BlockStored, Hashes: hs[:2], Tokens: toks[:8], BlockSize: 4})
	assert.Equal(t, 2.0, count("ok"))
	st.selfCheck(kvindex.Event{Kind: kvindex.BlockStored, Hashes: hs[2:], Parent: hs[1], HasParent: true, Tokens: toks[8:], BlockSize: 4})
	assert.Equal(t, 3.0, count("ok"), "the child continues from the verified parent's full digest")

	st.selfCheck(kvindex.Event{Kind: kvindex.BlockStored, Hashes: []kvindex.Hash{hs[0] + 1}, Tokens: toks[:4], BlockSize: 4})
	assert.Equal(t, 1.0, count("mismatch"))
	st.selfCheck(kvindex.Event{Kind: kvindex.BlockStored, Hashes: []kvindex.Hash{42}, Parent: 7, HasParent: true, Tokens: toks[:4], BlockSize: 4})
	assert.Equal(t, 3.0, count("ok"))
	assert.Equal(t, 1.0, count("mismatch"), "an unknown parent is not checked")

	salted := kvindex.AppendBlockHashes(nil, toks[:4], 4, "tenant")
	st.selfCheck(kvindex.Event{Kind: kvindex.BlockStored, Hashes: salted, Tokens: toks[:4], BlockSize: 4, CacheSalt: "tenant"})
	assert.Equal(t, 4.0, count("ok"), "a salted chain starts from the salt's seed")
}
