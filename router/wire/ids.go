package wire

import (
	"math/rand/v2"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

const ridAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// RIDRandomLen is the number of random [A-Za-z0-9] characters in a generated rid.
const RIDRandomLen = 24

// MaxRoom is the largest bootstrap_room: 2^63-1 (rooms are non-negative int64 for SGLang).
const MaxRoom = 1<<63 - 1

// IDGen generates request ids and bootstrap rooms from an injected random source, so the same
// seed gives the same ids (the simulator and `serve --seed` rely on it). It is safe for
// concurrent use (one mutex guards the source); the sequence is then deterministic only if the
// calls are made in a deterministic order.
type IDGen struct {
	mu   sync.Mutex // guards rng
	rng  *rand.Rand
	host string
}

// NewIDGen returns an IDGen drawing from rng and suffixing rids with host (the local IP found
// once at start by the caller; the simulator passes "sim"). rng must not be used elsewhere.
func NewIDGen(rng *rand.Rand, host string) *IDGen {
	return &IDGen{rng: rng, host: host}
}

// RID returns a fresh request id for route: `{prefix}{24 random [A-Za-z0-9]}-{host}` (SPEC
// §1.4 step 2), e.g. "chatcmpl-Qw3…-10.0.0.7".
func (g *IDGen) RID(route Route) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ridLocked(route)
}

// Room returns a fresh bootstrap room, uniform in [0, MaxRoom].
func (g *IDGen) Room() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.roomLocked()
}

func (g *IDGen) ridLocked(route Route) string {
	var buf [64]byte
	return string(g.appendRIDLocked(buf[:0], route))
}

// appendRIDLocked appends a fresh rid to dst (the draws of ridLocked).
func (g *IDGen) appendRIDLocked(dst []byte, route Route) []byte {
	dst = append(dst, route.RIDPrefix()...)
	for range RIDRandomLen {
		dst = append(dst, ridAlphabet[g.rng.IntN(len(ridAlphabet))])
	}
	dst = append(dst, '-')
	return append(dst, g.host...)
}

// ridLen is the length of every rid g generates for route.
func (g *IDGen) ridLen(route Route) int {
	return len(route.RIDPrefix()) + RIDRandomLen + 1 + len(g.host)
}

func (g *IDGen) roomLocked() uint64 { return g.rng.Uint64() & MaxRoom }

// BootstrapHost returns the bootstrap_host for a prefill worker URL, derived as sgl-router does
// with Rust's url::Url::host_str: the host without port; an IPv6 literal keeps its brackets and
// is written in canonical compressed lower-case form ("[::1]"); a domain is lower-cased; an
// unparsable URL (a port above 65535 included), or one without a host, gives "localhost".
// Not reproduced: the url crate's IDNA (punycode) encoding of non-ASCII domains and its
// WHATWG reading of short IPv4 forms such as "127.1".
func BootstrapHost(prefillURL string) string {
	const fallback = "localhost"
	u, err := url.Parse(prefillURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return fallback
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n > 65535 {
			return fallback // the url crate rejects such a URL outright
		}
	}
	host := u.Host
	if strings.HasPrefix(host, "[") {
		end := strings.IndexByte(host, ']')
		if end < 0 {
			return fallback
		}
		a, err := netip.ParseAddr(host[1:end])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return fallback
		}
		return "[" + formatIPv6(a.As16()) + "]"
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		host = host[:i]
	}
	if host == "" {
		return fallback
	}
	return strings.ToLower(host)
}

// formatIPv6 writes an IPv6 address as Rust's url crate does: eight lower-case hex groups, the
// longest run (first on ties) of two or more zero groups compressed to "::", and no dotted
// IPv4 tail (netip would write "::ffff:1.2.3.4").
func formatIPv6(a [16]byte) string {
	var g [8]uint16
	for i := range g {
		g[i] = uint16(a[2*i])<<8 | uint16(a[2*i+1])
	}
	bestStart, bestLen := -1, 1
	for i := 0; i < 8; {
		if g[i] != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && g[j] == 0 {
			j++
		}
		if j-i > bestLen {
			bestStart, bestLen = i, j-i
		}
		i = j
	}
	var b []byte
	for i := 0; i < 8; i++ {
		if i == bestStart {
			b = append(b, ':', ':')
			i += bestLen - 1
			continue
		}
		if len(b) > 0 && b[len(b)-1] != ':' {
			b = append(b, ':')
		}
		b = strconv.AppendUint(b, uint64(g[i]), 16)
	}
	return string(b)
}

// NewRand returns the wire format's random source for seed (rids and rooms). Serve and sim
// both build it from --seed, separately from the router's source, so rooms and rids are the
// same in both whatever the policies draw.
func NewRand(seed int64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), 0x77697265)) // "wire"
}
