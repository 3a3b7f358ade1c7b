package testutil

// PDScript is one scripted PD attempt: what each leg's worker does, in order, and what the
// router must make of it. router/server's tests play it with scripted HTTP workers, sim's with
// scripted engine outputs: both must reach Want, so serve and the simulator decide PD failures
// alike (issue 38's parity test).
type PDScript struct {
	Name string
	// Steps happen in this order; a leg with no step stays silent (it hangs until the router
	// cancels it).
	Steps []PDStep
	Want  PDWant
}

// PDStep is one thing a leg's worker does.
type PDStep struct {
	Leg string // "prefill" or "decode"
	// Answers: the prefill's reply, or decode's first token (its stream then goes on to a
	// normal end once the router has committed it).
	Answers bool
	// Otherwise the leg fails: with Status and Body, or with a transport error (the worker
	// closes the connection) when Status is 0.
	Status int
	Body   string
}

// PDWant is what the router makes of a PDScript with retries off.
type PDWant struct {
	// Charged lists the legs whose worker the attempt charges (a breaker Failure).
	PrefillCharged, DecodeCharged bool
	// Status is the status the client gets (200 when the attempt succeeds).
	Status int
	// Names is the leg whose worker the client's error names ("" when it succeeds): the one at
	// fault, which a retry would avoid.
	Names string
}

// Phrases of real SGLang errors (router.peerWaitPhrases cites their sources).
const (
	sglBootstrapTimeout = "Prefill bootstrap failed for request rank=0 with exception KVTransferError(bootstrap_room=7): Request 7 timed out after 30.0s in KVPoll.Bootstrapping"
	sglKVWait           = "Decode transfer failed for request rank=0 with exception KVTransferError(bootstrap_room=7): Request 7 timed out after 30.0s in KVPoll.WaitingForInput"
)

// PDScripts are the scripted PD failures both drivers play.
var PDScripts = []PDScript{
	{"both answer", []PDStep{{Leg: "prefill", Answers: true}, {Leg: "decode", Answers: true}},
		PDWant{Status: 200}},
	{"prefill's own 500 while decode is silent", []PDStep{{Leg: "prefill", Status: 500, Body: "CUDA out of memory"}},
		PDWant{PrefillCharged: true, Status: 500, Names: "prefill"}},
	{"prefill's transport error while decode is silent", []PDStep{{Leg: "prefill"}},
		PDWant{PrefillCharged: true, Status: 502, Names: "prefill"}},
	{"prefill's 400: the request's fault", []PDStep{{Leg: "prefill", Status: 400, Body: "invalid request: bad sampling params"}},
		PDWant{Status: 400, Names: "prefill"}},
	{"prefill's bootstrap timeout while decode is silent: decode charged", []PDStep{{Leg: "prefill", Status: 500, Body: sglBootstrapTimeout}},
		PDWant{DecodeCharged: true, Status: 502, Names: "decode"}},
	{"decode's KV wait while prefill is silent: prefill charged", []PDStep{{Leg: "decode", Status: 500, Body: sglKVWait}},
		PDWant{PrefillCharged: true, Status: 502, Names: "prefill"}},
	{"decode's KV wait after prefill answered: neither charged",
		[]PDStep{{Leg: "prefill", Answers: true}, {Leg: "decode", Status: 500, Body: sglKVWait}},
		PDWant{Status: 500, Names: "decode"}},
	{"decode's own 500 while prefill is silent", []PDStep{{Leg: "decode", Status: 500, Body: "CUDA out of memory"}},
		PDWant{DecodeCharged: true, Status: 500, Names: "decode"}},
	{"decode's transport error after prefill answered",
		[]PDStep{{Leg: "prefill", Answers: true}, {Leg: "decode"}},
		PDWant{DecodeCharged: true, Status: 502, Names: "decode"}},
}
