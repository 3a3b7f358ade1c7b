package kvindex

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// refChain is a deliberately plain restatement of the chain (sglang mem_cache/utils.py), to
// check the fast path against on inputs without golden vectors.
func refChain(tokens []uint32, page int, prev []byte) []Hash {
	var out []Hash
	for off := 0; off+page <= len(tokens); off += page {
		h := sha256.New()
		h.Write(prev)
		for _, t := range tokens[off : off+page] {
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], t)
			h.Write(b[:])
		}
		prev = h.Sum(nil)
		out = append(out, Hash(int64(binary.BigEndian.Uint64(prev[:8]))))
	}
	return out
}

func TestAppendBlockHashesGolden(t *testing.T) {
	t.Parallel()
	// The golden vectors (computed with SGLang's own get_hash_str + hash_str_to_int64).
	require.Equal(t, []Hash{-3488128144981237669}, AppendBlockHashes(nil, []uint32{1, 2, 3, 4}, 4, ""))
	require.Equal(t, []Hash{978178666101069530, -895308556211281782, -8033692805846017938, 835415944263129316},
		AppendBlockHashes(nil, []uint32{10, 20, 30, 40, 50, 60, 70, 80}, 2, ""))
}

func TestAppendBlockHashesShapes(t *testing.T) {
	t.Parallel()
	toks := make([]uint32, 300)
	for i := range toks {
		toks[i] = uint32(i*7919 + 13)
	}
	for _, page := range []int{1, 2, 16, 64, 65, 128} {
		got := AppendBlockHashes(nil, toks, page, "")
		require.Equal(t, refChain(toks, page, nil), got, "page %d", page)
		require.Len(t, got, len(toks)/page, "a partial last page has no hash")
	}
	// Salted chains start from the salt's digest, as the previous page's.
	seed := sha256.Sum256([]byte("sglang-cache-salt-v1\x00tenant-a"))
	require.Equal(t, seed, SaltSeed("tenant-a"))
	salted := AppendBlockHashes(nil, toks, 16, "tenant-a")
	require.Equal(t, refChain(toks, 16, seed[:]), salted)
	require.NotEqual(t, AppendBlockHashes(nil, toks, 16, ""), salted)

	// Appends to dst; a chain is a prefix of a longer chain's.
	dst := AppendBlockHashes([]Hash{42}, toks[:32], 16, "")
	require.Equal(t, Hash(42), dst[0])
	require.Equal(t, AppendBlockHashes(nil, toks, 16, "")[:2], dst[1:])

	require.Empty(t, AppendBlockHashes(nil, toks[:3], 4, ""))
	require.Empty(t, AppendBlockHashes(nil, toks, 0, ""))
}

func TestAppendBlockHashesAllocs(t *testing.T) {
	toks := make([]uint32, 8192)
	dst := make([]Hash, 0, 512)
	allocs := testing.AllocsPerRun(10, func() { dst = AppendBlockHashes(dst[:0], toks, 16, "") })
	require.Zero(t, allocs, "no allocation beyond dst for page 16")
}

func TestVerifyStored(t *testing.T) {
	t.Parallel()
	toks := []uint32{10, 20, 30, 40, 50, 60, 70, 80}
	hs := AppendBlockHashes(nil, toks, 2, "")
	ev := Event{Kind: BlockStored, Hashes: hs, Tokens: toks, BlockSize: 2}
	bad, last := VerifyStored(nil, ev)
	require.Zero(t, bad)
	// The returned digest continues the chain: the second half checked from the first's.
	_, mid := VerifyStored(nil, Event{Kind: BlockStored, Hashes: hs[:2], Tokens: toks[:4], BlockSize: 2})
	bad, last2 := VerifyStored(&mid, Event{Kind: BlockStored, Hashes: hs[2:], Tokens: toks[4:], BlockSize: 2, HasParent: true, Parent: hs[1]})
	require.Zero(t, bad)
	require.Equal(t, last, last2)
	require.Equal(t, hs[3], Truncate(last))

	ev.Hashes = []Hash{hs[0], hs[1] + 1, hs[2], hs[3]}
	bad, _ = VerifyStored(nil, ev)
	require.Equal(t, 1, bad, "one corrupted hash")
	bad, _ = VerifyStored(nil, Event{Kind: BlockStored, Hashes: hs, Tokens: toks[:4], BlockSize: 2})
	require.Equal(t, 2, bad, "blocks without tokens cannot be confirmed")

	seed := SaltSeed("s")
	salted := AppendBlockHashes(nil, toks, 2, "s")
	bad, _ = VerifyStored(&seed, Event{Kind: BlockStored, Hashes: salted, Tokens: toks, BlockSize: 2, CacheSalt: "s"})
	require.Zero(t, bad)
	bad, _ = VerifyStored(nil, Event{Kind: BlockStored, Hashes: salted, Tokens: toks, BlockSize: 2})
	require.Equal(t, 4, bad, "the salt changes every block")
}
