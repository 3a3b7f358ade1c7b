package wire

// Route is one of the inference endpoints whose bodies this package understands. The zero
// value is not a route.
type Route uint8

// The inference routes (SPEC §1.4).
const (
	Generate    Route = iota + 1 // POST /generate (SGLang native)
	Chat                         // POST /v1/chat/completions (OpenAI)
	Completions                  // POST /v1/completions (OpenAI)
)

// Routes lists every Route in a fixed order, for tables and tests.
var Routes = [...]Route{Generate, Chat, Completions}

// RouteFromPath maps an exact URL path ("/v1/chat/completions") to its Route; ok is false for
// any other path, including ones with a trailing slash or a query.
func RouteFromPath(path string) (r Route, ok bool) {
	switch path {
	case "/generate":
		return Generate, true
	case "/v1/chat/completions":
		return Chat, true
	case "/v1/completions":
		return Completions, true
	}
	return 0, false
}

// String returns the route's URL path ("/generate"), or "" for an invalid Route.
func (r Route) String() string {
	switch r {
	case Generate:
		return "/generate"
	case Chat:
		return "/v1/chat/completions"
	case Completions:
		return "/v1/completions"
	}
	return ""
}

// RIDPrefix returns the prefix of generated request ids for the route: "gnt-", "chatcmpl-" or
// "cmpl-" (SPEC §1.4 step 2); "req-" for an invalid Route.
func (r Route) RIDPrefix() string {
	switch r {
	case Generate:
		return "gnt-"
	case Chat:
		return "chatcmpl-"
	case Completions:
		return "cmpl-"
	}
	return "req-"
}
