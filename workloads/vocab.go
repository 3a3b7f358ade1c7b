package workloads

import "math/rand/v2"

// vocabSize is the number of distinct generated words; a power of two so one random uint64
// yields several word indices.
const vocabSize = 4096

// vocab holds the generated words, each with its leading space (" ka"), and their token ids.
// Built once at init; read-only afterwards, so safe for concurrent use.
var vocab, vocabIDs = buildVocab()

// buildVocab enumerates short pronounceable words in a fixed order: vowels, vowel-consonant,
// consonant-vowel, consonant-vowel-consonant, then consonant-vowel-consonant-vowel, until
// vocabSize words. Mean length ≈ 3.6 letters, i.e. ≈ 4.6 characters per token with the space.
func buildVocab() ([]string, []uint32) {
	const (
		vowels     = "aeiou"
		consonants = "bcdfghjklmnprstvwyz"
		finals     = "nrstlmdk"
	)
	words := make([]string, 0, vocabSize)
	add := func(w string) bool {
		if len(words) < vocabSize {
			words = append(words, " "+w)
		}
		return len(words) < vocabSize
	}
	for _, v := range vowels {
		add(string(v))
	}
	for _, v := range vowels {
		for _, f := range finals {
			add(string(v) + string(f))
		}
	}
	for _, c := range consonants {
		for _, v := range vowels {
			add(string(c) + string(v))
		}
	}
	for _, c := range consonants {
		for _, v := range vowels {
			for _, f := range finals {
				add(string(c) + string(v) + string(f))
			}
		}
	}
outer:
	for _, c := range consonants {
		for _, v := range vowels {
			for _, c2 := range consonants {
				for _, v2 := range vowels {
					if !add(string(c) + string(v) + string(c2) + string(v2)) {
						break outer
					}
				}
			}
		}
	}
	ids := make([]uint32, len(words))
	for i, w := range words {
		ids[i] = tokenID(w)
	}
	return words, ids
}

// wordStream draws vocabulary indices from a PCG stream, 5 indices (12 bits each) per uint64.
type wordStream struct {
	pcg  rand.PCG
	bits uint64
	left int
}

// newWordStream starts the stream keyed by (seed, key); equal keys give equal words.
func newWordStream(seed, key uint64) *wordStream {
	w := &wordStream{}
	w.pcg.Seed(seed, key)
	return w
}

func (w *wordStream) next() int {
	if w.left == 0 {
		w.bits, w.left = w.pcg.Uint64(), 5
	}
	i := int(w.bits & (vocabSize - 1))
	w.bits >>= 12
	w.left--
	return i
}

// appendText appends n generated words (exactly n tokens) to dst.
func (w *wordStream) appendText(dst []byte, n int) []byte {
	for ; n > 0; n-- {
		dst = append(dst, vocab[w.next()]...)
	}
	return dst
}

// appendIDs appends the token ids of the next n generated words to dst.
func (w *wordStream) appendIDs(dst []uint32, n int) []uint32 {
	for ; n > 0; n-- {
		dst = append(dst, vocabIDs[w.next()])
	}
	return dst
}

// mix hashes several values into one key (splitmix64 finalizer chained).
func mix(vs ...uint64) uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	for _, v := range vs {
		h ^= v + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2)
		h ^= h >> 30
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 27
		h *= 0x94d049bb133111eb
		h ^= h >> 31
	}
	return h
}

// Key domains keep the texts of different roles independent for the same seed.
const (
	domSystem uint64 = iota + 1
	domQuestion
	domLength
	domGSPSystem
	domGSPQuestion
	domLSP
	domRandom
	domBlock
	domTraceExtra
	domAzure
	domReply
	domShuffle
	domLevel // a level's seed (LevelSeed)
	domShareGPT
	domCPPrefix
	domCPQuestion
	domCPPick
	domHSPrefix
	domHSQuestion
	domHSCold
	domHSPick
)

// genText returns n generated tokens of text keyed by (seed, dom, a, b).
func genText(seed, dom, a, b uint64, n int) string {
	return string(newWordStream(seed, mix(dom, a, b)).appendText(make([]byte, 0, n*5), n))
}

// sampleLen draws a length uniform in [max(1, ⌊l·ratio⌋), l] (sglang's random lengths); ratio 1
// gives l. l ≤ 0 gives 0.
func sampleLen(r *rand.Rand, l int, ratio float64) int {
	if l <= 0 {
		return 0
	}
	lo := max(int(float64(l)*ratio), 1)
	if lo >= l {
		return l
	}
	return lo + r.IntN(l-lo+1)
}
