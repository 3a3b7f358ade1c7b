package engine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chaos runs a PD pair and a unified server under a seeded random schedule of submissions,
// aborts, kills, restarts and never-signal toggles, checking the invariants (KV capacity
// included, and the host tier's when host > 0 gives the prefill and unified ranks one of that
// many tokens) after every Advance. It returns every output, in order, for the determinism
// check, and the rooms submitted to each server.
func chaos(t *testing.T, seed uint64, lockstep, check bool, host int) (outs []Output, submitted [3][]uint64) {
	return chaosWith(t, seed, lockstep, check, host, nil)
}

// chaosWith is chaos with every server's configuration passed through edit first (nil: none).
func chaosWith(t *testing.T, seed uint64, lockstep, check bool, host int, edit func(*Config)) (outs []Output, submitted [3][]uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xc0ffee))
	p := testProfile()
	mk := func(role Role, capacity int) *Server {
		if host > 0 && role != RoleDecode {
			capacity /= 2 // GPU pressure, so that prefixes spill to the host tier
		}
		cfg := Config{Role: role, Profile: p, DPSize: 2, DPAttention: lockstep, MaxTotalTokens: capacity,
			BootstrapTimeout: 300 * time.Millisecond, ChunkedPrefillSize: 512, ReservedDecodeTokens: 16, MaxRunningRequests: 8, PageSize: 1 + int(seed%2)*3,
			HostCacheTokens: host}
		if edit != nil {
			edit(&cfg)
		}
		return newServer(t, cfg)
	}
	c := &cluster{t: t, prefill: mk(RolePrefill, 6000), decode: mk(RoleDecode, 4000), single: mk(RoleUnified, 5000), check: check}
	servers := [3]*Server{c.prefill, c.decode, c.single}
	const horizon = 5 * time.Second
	nextChaos := at(0)
	room := uint64(0)
	hostHit := int64(0) // tokens loaded back from the host tier
	for i := 0; ; i++ {
		require.Less(t, i, 2_000_000, "runaway")
		tEng, ok := c.next()
		if nextChaos.Before(at(horizon)) && (!ok || !tEng.Before(nextChaos)) {
			c.now = nextChaos
			switch x := rng.IntN(100); {
			case x < 55: // a request: to the PD pair or the unified server
				room++
				// Prompts share prefixes: one of 4 system prompts, then a random tail.
				pr := append(prompt(uint32(rng.IntN(4))*100000, 100+rng.IntN(400)), prompt(uint32(room)*1000+500000, 1+rng.IntN(600))...)
				r := Req{Room: room, Rank: -1, Prompt: pr, MaxNew: 1 + rng.IntN(60)}
				if rng.IntN(5) == 0 {
					r.Rank = rng.IntN(2)
				}
				if rng.IntN(2) == 0 {
					r.Output = prompt(uint32(room)*1000+900000, r.MaxNew)
				}
				if rng.IntN(2) == 0 {
					c.prefill.Submit(c.now, r)
					c.decode.Submit(c.now, r)
					submitted[0] = append(submitted[0], room)
					submitted[1] = append(submitted[1], room)
				} else {
					c.single.Submit(c.now, r)
					submitted[2] = append(submitted[2], room)
				}
			case x < 80:
				if room > 0 {
					servers[rng.IntN(3)].Abort(c.now, 1+rng.Uint64N(room), "chaos")
				}
			case x < 82:
				k := servers[rng.IntN(3)]
				for _, l := range k.Loads(c.now) { // a kill empties the ranks' counters
					hostHit += l.HostCachedTokens
				}
				k.Kill(c.now)
			case x < 94:
				servers[rng.IntN(3)].restart(c.now)
			default:
				c.prefill.setNeverSignalKV(rng.IntN(3) == 0)
			}
			for _, s := range servers {
				if check {
					require.NoError(t, s.checkInvariants())
				}
			}
			nextChaos = nextChaos.Add(time.Duration(rng.ExpFloat64() * float64(5*time.Millisecond)))
			continue
		}
		if !ok {
			break
		}
		c.step(tEng)
	}
	for _, s := range servers {
		assert.Zero(t, s.Live(), "every room ended")
		for _, l := range s.Loads(c.now) {
			hostHit += l.HostCachedTokens
		}
	}
	if host > 0 {
		assert.Positive(t, hostHit, "the host tier served hits")
		t.Logf("host tier: %d tokens loaded back", hostHit)
	}
	return c.outs, submitted
}

func TestConservationUnderChaos(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2, 3} {
		for _, lockstep := range []bool{false, true} {
			for _, host := range []int{0, 8000} {
				t.Run(fmt.Sprintf("seed=%d/lockstep=%v/host=%d", seed, lockstep, host), func(t *testing.T) {
					t.Parallel()
					outs, submitted := chaos(t, seed, lockstep, true, host)
					// Outputs of the three servers are interleaved; split them by the rooms each got.
					// Rooms are unique across servers except the PD pair, so count per (room, side):
					// a PD room ends exactly twice (once per side), a unified room once.
					pd := map[uint64]bool{}
					for _, r := range submitted[0] {
						pd[r] = true
					}
					ends := map[uint64]int{}
					var finished, failed int
					causes := map[string]int{}
					for _, o := range outs {
						switch o.Kind {
						case KindFinished:
							ends[o.Room]++
							finished++
						case KindFailed:
							ends[o.Room]++
							failed++
							require.NotEmpty(t, o.Reason)
							require.Contains(t, o.Reason, fmt.Sprintf("room %d", o.Room))
							for _, cause := range []string{"server killed", "server is dead", "aborted", "KVPoll.Bootstrapping", "KVPoll.WaitingForInput", "kv transfer did not complete", "capacity"} {
								if strings.Contains(o.Reason, cause) {
									causes[cause]++
								}
							}
						}
					}
					for _, r := range submitted[0] {
						require.Equal(t, 2, ends[r], "PD room %d must end once per side", r)
					}
					for _, r := range submitted[2] {
						require.Equal(t, 1, ends[r], "unified room %d must end exactly once", r)
					}
					require.Equal(t, 2*len(submitted[0])+len(submitted[2]), finished+failed)
					t.Logf("%d PD rooms, %d unified rooms: %d finished, %d failed %v", len(submitted[0]), len(submitted[2]), finished, failed, causes)
					for _, cause := range []string{"server killed", "aborted", "KVPoll.Bootstrapping", "KVPoll.WaitingForInput"} {
						assert.Positive(t, causes[cause], "the schedule exercised %q", cause)
					}
					assert.Positive(t, finished)
					assert.Positive(t, failed)
				})
			}
		}
	}
}

func TestDeterminism(t *testing.T) {
	t.Parallel()
	for _, host := range []int{0, 8000} {
		a, _ := chaos(t, 7, true, false, host)
		b, _ := chaos(t, 7, true, false, host)
		require.Equal(t, len(a), len(b))
		for i := range a {
			require.Equal(t, a[i], b[i], "host %d: output %d", host, i)
		}
	}
}
