package kvindex

import (
	"crypto/sha256"
	"encoding/binary"
)

// SGLang's block-hash chain, as its radix cache computes it for KV events:
//   - sglang python/sglang/srt/mem_cache/events.py KVCacheEventMixin._record_store_event: one
//     BlockStored per page of a node, hashed by compute_node_hash_values, the chain continuing
//     from the parent node's last full digest;
//   - python/sglang/srt/mem_cache/utils.py get_hash_str / get_native_hash: per page, SHA-256 over
//     the previous page's 32-byte digest (nothing for the chain's first page) and then each token
//     id as 4 little-endian bytes;
//   - utils.py hash_str_to_int64: the event carries the digest's first 8 bytes (16 hex digits)
//     read big-endian, as a signed int64;
//   - utils.py compute_node_event_hash_values: a request with a cache_salt starts its chain from
//     sha256("sglang-cache-salt-v1\0" + salt) (its hexdigest, turned back into the 32 bytes by
//     get_hash_str's bytes.fromhex), i.e. the salt's digest plays the previous page's part.
//
// Not modelled: EAGLE's bigram keys (two token ids per position) and the LoRA namespace mixing of
// newer SGLang; requests of those kinds simply match nothing.

// maxStackPage is the largest page hashed from a stack buffer (larger pages use one heap
// buffer per call).
const maxStackPage = 64

// SaltSeed returns the digest a salted chain starts from: sha256(SaltSeedPrefix + salt).
func SaltSeed(salt string) [32]byte {
	buf := make([]byte, 0, len(SaltSeedPrefix)+len(salt))
	buf = append(buf, SaltSeedPrefix...)
	buf = append(buf, salt...)
	return sha256.Sum256(buf)
}

// Truncate returns the published form of a full page digest: its first 8 bytes, big-endian,
// as a signed integer (sglang mem_cache/utils.py hash_str_to_int64).
func Truncate(d [32]byte) Hash { return Hash(int64(binary.BigEndian.Uint64(d[:8]))) }

// chain computes successive page digests from buf: the previous digest (32 bytes, when has)
// followed by one page's tokens (4 bytes each). buf is the caller's, so that it can live on
// the caller's stack.
type chain struct {
	buf []byte
	has bool // buf[:32] holds a previous digest
}

func newChain(buf []byte, prev *[32]byte) chain {
	if prev != nil {
		copy(buf[:32], prev[:])
	}
	return chain{buf: buf, has: prev != nil}
}

// pageBuf returns a buffer for a page of page tokens: stack[:] when it fits.
func pageBuf(stack *[32 + 4*maxStackPage]byte, page int) []byte {
	n := 32 + 4*page
	if page <= maxStackPage {
		return stack[:n]
	}
	return make([]byte, n)
}

// next hashes one page of tokens (len(tokens) == page) and makes it the previous digest.
func (c *chain) next(tokens []uint32) [32]byte {
	b := c.buf[32:]
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(b[4*i:], t)
	}
	var d [32]byte
	if c.has {
		d = sha256.Sum256(c.buf)
	} else {
		d = sha256.Sum256(b)
		c.has = true
	}
	copy(c.buf[:32], d[:])
	return d
}

// AppendBlockHashes appends the hash of every full page of tokens (page tokens each; a partial
// last page has none) to dst, chained as SGLang chains them; salt "" is the unsalted chain (an
// explicitly empty salt, which SGLang would seed, cannot be expressed). It allocates nothing
// beyond dst's growth for page ≤ 64. page < 1 yields nothing.
func AppendBlockHashes(dst []Hash, tokens []uint32, page int, salt string) []Hash {
	if page < 1 || len(tokens) < page {
		return dst
	}
	var stack [32 + 4*maxStackPage]byte
	var c chain
	if salt != "" {
		seed := SaltSeed(salt)
		c = newChain(pageBuf(&stack, page), &seed)
	} else {
		c = newChain(pageBuf(&stack, page), nil)
	}
	dst = growHashes(dst, len(tokens)/page)
	for off := 0; off+page <= len(tokens); off += page {
		dst = append(dst, Truncate(c.next(tokens[off:off+page])))
	}
	return dst
}

func growHashes(dst []Hash, n int) []Hash {
	if cap(dst)-len(dst) >= n {
		return dst
	}
	out := make([]Hash, len(dst), len(dst)+n)
	copy(out, dst)
	return out
}

// VerifyStored recomputes a BlockStored event's hashes from its token ids (ev.BlockSize per
// block) and returns how many of ev.Hashes differ from the recomputation (blocks whose tokens
// are missing count as differing) and the full digest of the event's last block, which
// continues the chain. prev is the full digest of the block before the event's first one: nil
// for a chain's first block (no parent, no salt), or [SaltSeed] of the event's salt.
//
// The index cannot run this check on its own for a block with a parent: the event carries the
// parent's truncated hash, and a chain continues only from the full digest. A caller that wants
// the self-check checks the events without a parent (prev nil, or the salt's seed), and those
// whose parent it verified before, from the digest returned then.
func VerifyStored(prev *[32]byte, ev Event) (mismatches int, last [32]byte) {
	page := ev.BlockSize
	if page < 1 {
		return len(ev.Hashes), last
	}
	var stack [32 + 4*maxStackPage]byte
	c := newChain(pageBuf(&stack, page), prev)
	for i, h := range ev.Hashes {
		off := i * page
		if off+page > len(ev.Tokens) {
			return mismatches + len(ev.Hashes) - i, last
		}
		last = c.next(ev.Tokens[off : off+page])
		if Truncate(last) != h {
			mismatches++
		}
	}
	return mismatches, last
}
