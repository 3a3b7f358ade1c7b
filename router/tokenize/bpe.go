package tokenize

import "sync"

// bytesToUnicode is GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves,
// the other 68 bytes map to U+0100.. in byte order. tokenizer.json vocabularies spell tokens in it.
var bytesToUnicode = func() (t [256]rune) {
	n := 0
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = rune(256 + n)
			n++
		}
	}
	return t
}()

// unicodeToByte inverts bytesToUnicode (-1: not in the alphabet).
var unicodeToByte = func() map[rune]int {
	m := make(map[rune]int, 256)
	for b, r := range bytesToUnicode {
		m[r] = b
	}
	return m
}()

// decodeByteLevel turns a vocabulary token back into its raw bytes; ok is false when the token
// holds a character outside the byte-level alphabet.
func decodeByteLevel(tok string) (string, bool) {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := unicodeToByte[r]
		if !ok {
			return "", false
		}
		out = append(out, byte(b))
	}
	return string(out), true
}

// bpeModel is a byte-level BPE model (tokenizers' models/bpe) over token ids: a word's bytes
// start as the ids of their single-byte tokens and the adjacent pair of lowest merge rank is
// merged (the leftmost on ties) until no pair has a merge, as Word::merge_all does.
type bpeModel struct {
	byteID       [256]uint32       // id of each single-byte token
	merges       pairTable         // (left id<<32 | right id) → (rank<<32 | merged id)
	vocab        map[string]uint32 // raw bytes of each token → id (for ignore_merges)
	ignoreMerges bool              // a word that is a whole token is that token

	mu    sync.RWMutex
	cache map[string][]uint32 // word bytes → ids
}

// maxCache bounds the word cache; it is dropped whole when full (simple, and words repeat).
const maxCache = 1 << 18

// maxCachedWord: longer words (runs of spaces, base64…) are not cached.
const maxCachedWord = 256

// appendWord appends the ids of one pre-tokenized word (raw bytes, non-empty).
func (m *bpeModel) appendWord(dst []uint32, word string) []uint32 {
	if len(word) == 1 {
		return append(dst, m.byteID[word[0]])
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(dst, id)
		}
	}
	if len(word) <= maxCachedWord {
		m.mu.RLock()
		ids, ok := m.cache[word]
		m.mu.RUnlock()
		if ok {
			return append(dst, ids...)
		}
	}
	start := len(dst)
	dst = m.merge(dst, word)
	if len(word) <= maxCachedWord {
		ids := make([]uint32, len(dst)-start)
		copy(ids, dst[start:])
		m.mu.Lock()
		if len(m.cache) >= maxCache {
			m.cache = make(map[string][]uint32, 1024)
		}
		m.cache[word] = ids
		m.mu.Unlock()
	}
	return dst
}

const noMerge = ^uint32(0)

// merge runs the BPE merges over word and appends the resulting ids to dst. The symbols live
// in dst itself; ranks[k] is the rank of the pair (sym k, sym k+1).
func (m *bpeModel) merge(dst []uint32, word string) []uint32 {
	start := len(dst)
	for i := 0; i < len(word); i++ {
		dst = append(dst, m.byteID[word[i]])
	}
	syms := dst[start:]
	var rankBuf [64]uint32
	ranks := rankBuf[:0]
	var idBuf [64]uint32
	newIDs := idBuf[:0]
	for k := 0; k+1 < len(syms); k++ {
		r, id := m.pair(syms[k], syms[k+1])
		ranks = append(ranks, r)
		newIDs = append(newIDs, id)
	}
	for {
		best := -1
		bestRank := noMerge
		for k, r := range ranks {
			if r < bestRank {
				best, bestRank = k, r
			}
		}
		if best < 0 {
			break
		}
		syms[best] = newIDs[best]
		copy(syms[best+1:], syms[best+2:])
		syms = syms[:len(syms)-1]
		copy(ranks[best:], ranks[best+1:])
		ranks = ranks[:len(ranks)-1]
		copy(newIDs[best:], newIDs[best+1:])
		newIDs = newIDs[:len(newIDs)-1]
		if best > 0 {
			ranks[best-1], newIDs[best-1] = m.pair(syms[best-1], syms[best])
		}
		if best < len(ranks) {
			ranks[best], newIDs[best] = m.pair(syms[best], syms[best+1])
		}
	}
	return dst[:start+len(syms)]
}

// pair returns the merge rank and merged id of (a, b), or noMerge.
func (m *bpeModel) pair(a, b uint32) (uint32, uint32) {
	v, ok := m.merges.get(uint64(a)<<32 | uint64(b))
	if !ok {
		return noMerge, 0
	}
	return uint32(v >> 32), uint32(v)
}

// pairTable is an open-addressing hash table from merge pair to merge: a Go map costs about
// twice as much per lookup here, and the lookups are most of a cache miss's BPE time.
type pairTable struct {
	slots []pairSlot
	shift uint
}

type pairSlot struct{ k, v uint64 }

const emptyPair = ^uint64(0) // ids are below 2^32-1, so no pair key is all ones

func newPairTable(n int) pairTable {
	size, shift := 1, uint(64)
	for size < 2*n+1 {
		size <<= 1
		shift--
	}
	t := pairTable{slots: make([]pairSlot, size), shift: shift}
	for i := range t.slots {
		t.slots[i].k = emptyPair
	}
	return t
}

func (t *pairTable) hash(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// put stores v under k unless k is already there (the first, lowest rank wins).
func (t *pairTable) put(k, v uint64) {
	mask := uint64(len(t.slots) - 1)
	for i := t.hash(k); ; i = (i + 1) & mask {
		switch t.slots[i].k {
		case k:
			return
		case emptyPair:
			t.slots[i] = pairSlot{k, v}
			return
		}
	}
}

func (t *pairTable) get(k uint64) (uint64, bool) {
	mask := uint64(len(t.slots) - 1)
	for i := t.hash(k); ; i = (i + 1) & mask {
		switch t.slots[i].k {
		case k:
			return t.slots[i].v, true
		case emptyPair:
			return 0, false
		}
	}
}
