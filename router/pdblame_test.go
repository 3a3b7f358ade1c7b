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
		{"fakeworker's handshake timeout, decode silent", PDFailure{Role: Prefill, Attempt: Attempt{Status: 500, Body: []byte("fakeworker: prefill http://p room 3 failed: Request 3 timed out after 3.0s in KVPoll.Bootstrapping")}, PeerOpen: true}, Cancelled, Failure},
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

// Every peer-wait phrase, in the message SGLang builds around it (its format strings, as
// router/retry.go cites them), tells the leg that reports it waited for its peer — and only
// on that leg; the messages that cannot tell who is at fault tell neither.
func TestWaitedForPeerOnSGLangMessages(t *testing.T) {
	t.Parallel()
	const pw = "Prefill transfer failed for request rank=0 req.rid='r' req.bootstrap_room=7 with exception KVTransferError(bootstrap_room=7): "
	const pb = "Prefill bootstrap failed for request rank=0 req.rid='r' req.bootstrap_room=7 with exception KVTransferError(bootstrap_room=7): "
	const dh = "Decode handshake failed for request rank=0 decode_req.req.rid='r' decode_req.req.bootstrap_room=7 with exception KVTransferError(bootstrap_room=7): "
	const dt = "Decode transfer failed for request rank=0 decode_req.req.rid='r' decode_req.req.bootstrap_room=7 with exception KVTransferError(bootstrap_room=7): "
	for _, tc := range []struct {
		role Role // the leg that reports it; numRoles: undecidable, no leg waited
		msg  string
	}{
		{Prefill, pb + "Request 7 timed out after 300.0s in KVPoll.Bootstrapping"},
		{Prefill, pb + "Failed due to an unknown reason from another rank"}, // the wrapper: bootstrap not done
		{Prefill, pw + "Decode instance could be dead, remote mooncake session 10.0.0.3:16001 is not alive"},
		{Prefill, pw + "Failed to send kv chunk of 7 to 10.0.0.3:16001"},
		{Prefill, pw + "Aborted by decode-side abort notification."},
		{Prefill, "fakeworker: prefill http://p:1 room 7 failed: aborted: Decode instance could be dead, remote mooncake session http://d:2 is not alive"},
		{Decode, dt + "Request 7 timed out after 300.0s in KVPoll.WaitingForInput"},
		{Decode, dh + "Could not fetch prefill parallel info from bootstrap_addr: 10.0.0.1:8998"},
		{Decode, dh + "Could not fetch bootstrap info for: prefill_dp_rank: 0 prefill_cp_rank: 0 target_tp_rank: 0 and target_pp_rank 0"},
		{Decode, dt + "Lost connection with prefill instance (bootstrap_addr: 10.0.0.1:8998)"},
		{Decode, dt + "Losing connection with prefill instance (bootstrap_addr: 10.0.0.1:8998)"},
		{Decode, dh + "Prefill server with bootstrap_addr: 10.0.0.1:8998 is healthy before, but now it is down. Request (bootstrap_room: 7) has been marked as failed."},
		{Decode, dt + "PD retract rebootstrap /generate failed for rid=r (status=503)."},
		{numRoles, pw + "Failed due to an unknown reason from another rank"},
		{numRoles, dt + "Failed to get kvcache from prefill instance, it might be dead"},
		{numRoles, dt + "Aborted by AbortReq."},
		{numRoles, pw + "NIXL KVSender Exception"},
	} {
		for _, role := range []Role{Prefill, Decode} {
			assert.Equal(t, role == tc.role, WaitedForPeer(role, []byte(tc.msg)), "%s leg: %s", role, tc.msg)
		}
	}
}
