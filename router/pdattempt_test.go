package router

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// pdStep is one leg event of a scripted PD attempt.
type pdStep struct {
	role    Role
	answer  bool    // Answered
	fail    Attempt // Failed with this (when !answer and !commit)
	commit  bool    // Commit (role unused)
	cancels bool    // Failed's verdict: cancel the peer
	commits bool    // Commit's verdict
}

func TestPDAttempt(t *testing.T) {
	t.Parallel()
	kvWait := Attempt{Status: 500, Body: []byte("Request 7 timed out after 300.0s in KVPoll.WaitingForInput")}
	bootTimeout := Attempt{Status: 500, Body: []byte("Request 7 timed out after 30.0s in KVPoll.Bootstrapping")}
	oom := Attempt{Status: 500, Body: []byte("CUDA out of memory")}
	conn := Attempt{Transport: true}
	bad := Attempt{Status: 400, Body: []byte("bad request")}
	answer := func(r Role) pdStep { return pdStep{role: r, answer: true} }
	fail := func(r Role, a Attempt, cancels bool) pdStep { return pdStep{role: r, fail: a, cancels: cancels} }
	commit := func(ok bool) pdStep { return pdStep{commit: true, commits: ok} }
	tests := []struct {
		name             string
		steps            []pdStep
		prefill, decode  Outcome // Outcome of each leg afterwards
		failed           bool
		failedLeg, blame Role
	}{
		{"both answer, commit", []pdStep{answer(Prefill), answer(Decode), commit(true)}, Cancelled, Cancelled, false, 0, 0},
		{"prefill's own 500 before decode answers: prefill charged, decode cancelled",
			[]pdStep{fail(Prefill, oom, true), commit(false)}, Failure, Cancelled, true, Prefill, Prefill},
		{"prefill's transport error", []pdStep{fail(Prefill, conn, true)}, Failure, Cancelled, true, Prefill, Prefill},
		{"prefill 400: the request's fault, no one charged", []pdStep{fail(Prefill, bad, true)}, Success, Cancelled, true, Prefill, Prefill},
		{"prefill bootstrap timeout while decode silent: decode charged",
			[]pdStep{fail(Prefill, bootTimeout, true)}, Cancelled, Failure, true, Prefill, Decode},
		{"prefill bootstrap timeout after decode answered: neither charged",
			[]pdStep{answer(Decode), fail(Prefill, bootTimeout, true)}, Cancelled, Cancelled, true, Prefill, Prefill},
		{"decode KV wait while prefill silent: prefill charged",
			[]pdStep{fail(Decode, kvWait, true)}, Failure, Cancelled, true, Decode, Prefill},
		{"decode KV wait after prefill answered: neither charged",
			[]pdStep{answer(Prefill), fail(Decode, kvWait, true)}, Cancelled, Cancelled, true, Decode, Decode},
		{"decode's own 500: decode charged", []pdStep{fail(Decode, oom, true)}, Cancelled, Failure, true, Decode, Decode},
		{"the first failure decides: a charged prefill's own timeout afterwards changes nothing",
			[]pdStep{fail(Decode, kvWait, true), fail(Prefill, bootTimeout, false)}, Failure, Cancelled, true, Decode, Prefill},
		{"a second failure keeps its own outcome",
			[]pdStep{fail(Prefill, oom, true), fail(Decode, oom, false)}, Failure, Failure, true, Prefill, Prefill},
		{"after the commit a prefill failure neither cancels decode nor fails the attempt",
			[]pdStep{answer(Decode), commit(true), fail(Prefill, oom, false)}, Failure, Cancelled, false, 0, 0},
		{"a leg's second Failed is ignored",
			[]pdStep{fail(Prefill, oom, true), fail(Prefill, conn, false)}, Failure, Cancelled, true, Prefill, Prefill},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var a PDAttempt
			for i, s := range tc.steps {
				switch {
				case s.commit:
					assert.Equal(t, s.commits, a.Commit(), "step %d: Commit", i)
				case s.answer:
					a.Answered(s.role)
				default:
					assert.Equal(t, s.cancels, a.Failed(s.role, s.fail), "step %d: Failed's cancel", i)
				}
			}
			assert.Equal(t, tc.prefill, a.Outcome(Prefill), "prefill's outcome")
			assert.Equal(t, tc.decode, a.Outcome(Decode), "decode's outcome")
			f, failed := a.Failure()
			assert.Equal(t, tc.failed, failed, "attempt failed")
			if tc.failed {
				assert.Equal(t, tc.failedLeg, f.Failed, "failed leg")
				assert.Equal(t, tc.blame, f.Blamed, "blamed leg")
			}
		})
	}
}
