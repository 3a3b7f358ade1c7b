package router

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPDBlame(t *testing.T) {
	t.Parallel()
	sglPrefillTimeout := []byte("Prefill bootstrap failed for request rank=0 req.rid='a' req.bootstrap_room=7 with exception KVTransferError(bootstrap_room=7): Request 7 timed out after 300.0s in KVPoll.Bootstrapping")
	sglDecodeWait := []byte("Decode transfer failed for request rank=0 with exception KVTransferError(bootstrap_room=7): Request 7 timed out after 300.0s in KVPoll.WaitingForInput")
	for _, tc := range []struct {
		name         string
		f            PDFailure
		failed, peer Outcome
	}{
		// The symptom on the prefill leg of a decode worker that never registered the room.
		{"prefill bootstrap timeout, decode silent", PDFailure{Role: Prefill, Attempt: Attempt{Status: 500, Body: sglPrefillTimeout}, PeerOpen: true}, Cancelled, Failure},
		{"fakeworker's handshake timeout, decode silent", PDFailure{Role: Prefill, Attempt: Attempt{Status: 500, Body: []byte("fakeworker: prefill http://p room 3 failed: bootstrap timeout: no decode handshake within 3s")}, PeerOpen: true}, Cancelled, Failure},
		// Decode had answered: the hand-off failed between two workers that did their part.
		{"prefill bootstrap timeout, decode answered", PDFailure{Role: Prefill, Attempt: Attempt{Status: 500, Body: sglPrefillTimeout}}, Cancelled, Cancelled},
		// A prefill failure of its own stays its own, whatever decode does.
		{"prefill 500 of its own", PDFailure{Role: Prefill, Attempt: Attempt{Status: 500, Body: []byte("CUDA out of memory")}, PeerOpen: true}, Failure, Cancelled},
		{"prefill transport error", PDFailure{Role: Prefill, Attempt: Attempt{Transport: true}, PeerOpen: true}, Failure, Cancelled},
		{"prefill 400", PDFailure{Role: Prefill, Attempt: Attempt{Status: 400, Body: []byte("bad request")}, PeerOpen: true}, Success, Cancelled},
		// The mirror: decode waited for KV a silent prefill never sent.
		{"decode KV wait, prefill silent", PDFailure{Role: Decode, Attempt: Attempt{Status: 500, Body: sglDecodeWait}, PeerOpen: true}, Cancelled, Failure},
		{"decode cannot reach the prefill's bootstrap server", PDFailure{Role: Decode, Attempt: Attempt{Status: 500, Body: []byte("Could not fetch prefill parallel info from bootstrap_addr: 10.0.0.1:8998")}, PeerOpen: true}, Cancelled, Failure},
		{"decode KV wait, prefill answered", PDFailure{Role: Decode, Attempt: Attempt{Status: 500, Body: sglDecodeWait}}, Cancelled, Cancelled},
		// Phrases count only on the side that says them: a decode quoting the prefill's words is
		// not waiting for the prefill.
		{"decode says a prefill phrase", PDFailure{Role: Decode, Attempt: Attempt{Status: 503, Body: sglPrefillTimeout}, PeerOpen: true}, Failure, Cancelled},
		{"decode 503 of its own", PDFailure{Role: Decode, Attempt: Attempt{Status: 503, Body: []byte("decode full")}, PeerOpen: true}, Failure, Cancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failed, peer := PDBlame(tc.f)
			assert.Equal(t, tc.failed, failed, "the failed leg's outcome")
			assert.Equal(t, tc.peer, peer, "the peer's outcome")
		})
	}
}
