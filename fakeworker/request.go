package fakeworker

import (
	"bytes"
	"encoding/json"
	"net"
	"strconv"

	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

// params is what a worker takes from an inference body beyond wire.Body's view.
type params struct {
	maxNew       int    // output tokens (max_tokens / max_completion_tokens / sampling_params.max_new_tokens; default 128)
	includeUsage bool   // stream_options.include_usage
	rank         int    // DP rank asked for; -1: the engine picks
	hasRoom      bool   // bootstrap_room present (PD)
	room         uint64 // bootstrap_room
	bsAddr       string // decode: host:port of the prefill's bootstrap server
}

func badField(field, msg string) *wire.Error {
	return &wire.Error{Status: 400, Type: wire.TypeInvalidRequest, Field: field, Message: msg}
}

func isNull(v []byte) bool { return v == nil || string(bytes.TrimSpace(v)) == "null" }

// intField reads an optional non-negative integer member; ok is false when absent or null.
func intField(b *wire.Body, name string) (n int, ok bool, err *wire.Error) {
	v, present := b.Field(name)
	if !present || isNull(v) {
		return 0, false, nil
	}
	n, e := strconv.Atoi(string(bytes.TrimSpace(v)))
	if e != nil || n < 0 {
		return 0, false, badField(name, name+" must be a non-negative integer, got "+string(v))
	}
	return n, true, nil
}

// apiOf maps a wire route to the workloads API.
func apiOf(r wire.Route) workloads.API {
	switch r {
	case wire.Chat:
		return workloads.APIChat
	case wire.Completions:
		return workloads.APICompletions
	}
	return workloads.APIGenerate
}

// parseParams reads max tokens, usage, DP rank and bootstrap fields for a worker in mode with
// dpSize ranks. dpHeader is the X-Data-Parallel-Rank header ("" when absent). Errors are 400s
// naming the field.
func parseParams(b *wire.Body, mode engine.Role, dpSize int, dpHeader string) (params, *wire.Error) {
	p := params{maxNew: DefaultMaxNewTokens, rank: -1}
	if b.Batch > 0 {
		return p, badField("", "batch requests (list prompts, chat n > 1) are not supported by fakeworker")
	}
	// Max output tokens.
	switch b.Route {
	case wire.Generate:
		if v, ok := b.Field("sampling_params"); ok && !isNull(v) {
			var sp struct {
				MaxNewTokens *int `json:"max_new_tokens"`
			}
			if err := json.Unmarshal(v, &sp); err != nil {
				return p, badField("sampling_params", "sampling_params must be an object with an integer max_new_tokens: "+err.Error())
			}
			if sp.MaxNewTokens != nil {
				if *sp.MaxNewTokens < 0 {
					return p, badField("sampling_params", "sampling_params.max_new_tokens must not be negative")
				}
				p.maxNew = *sp.MaxNewTokens
			}
		}
	default:
		for _, name := range [...]string{"max_completion_tokens", "max_tokens"} {
			n, ok, err := intField(b, name)
			if err != nil {
				return p, err
			}
			if ok {
				p.maxNew = n
				break
			}
		}
		if v, ok := b.Field("stream_options"); ok && !isNull(v) {
			var so struct {
				IncludeUsage bool `json:"include_usage"`
			}
			if err := json.Unmarshal(v, &so); err != nil {
				return p, badField("stream_options", "stream_options must be an object: "+err.Error())
			}
			p.includeUsage = so.IncludeUsage
		}
	}
	p.maxNew = max(p.maxNew, 1)

	// DP rank: the legacy names, else the routed ones, else the header.
	var rankFields []string
	switch mode {
	case engine.RoleDecode:
		rankFields = []string{"data_parallel_rank_decode", "routed_dp_rank"}
	default:
		rankFields = []string{"data_parallel_rank", "routed_dp_rank"}
	}
	for _, name := range rankFields {
		n, ok, err := intField(b, name)
		if err != nil {
			return p, err
		}
		if ok {
			if n >= dpSize {
				return p, badField(name, name+" "+strconv.Itoa(n)+" is outside [0,"+strconv.Itoa(dpSize)+") (dp_size "+strconv.Itoa(dpSize)+")")
			}
			p.rank = n
			break
		}
	}
	if p.rank < 0 && dpHeader != "" {
		n, err := strconv.Atoi(dpHeader)
		if err != nil || n < 0 || n >= dpSize {
			return p, badField("", "X-Data-Parallel-Rank "+strconv.Quote(dpHeader)+" is not a rank in [0,"+strconv.Itoa(dpSize)+")")
		}
		p.rank = n
	}

	if mode == engine.RoleUnified {
		return p, nil
	}
	// PD: bootstrap fields.
	rv, ok := b.Field("bootstrap_room")
	if !ok || isNull(rv) {
		return p, badField("bootstrap_room", "bootstrap_room is required on a "+mode.String()+" worker (send bootstrap_host, bootstrap_port and bootstrap_room, as the PD router does)")
	}
	room, e := strconv.ParseUint(string(bytes.TrimSpace(rv)), 10, 64)
	if e != nil {
		return p, badField("bootstrap_room", "bootstrap_room must be an integer in [0,2^64), got "+string(rv))
	}
	p.hasRoom, p.room = true, room
	hv, ok := b.Field("bootstrap_host")
	if !ok || isNull(hv) {
		return p, badField("bootstrap_host", "bootstrap_host is required on a "+mode.String()+" worker")
	}
	var host string
	if err := json.Unmarshal(hv, &host); err != nil || host == "" {
		return p, badField("bootstrap_host", "bootstrap_host must be a non-empty string, got "+string(hv))
	}
	port := DefaultBootstrapPort
	if n, ok, err := intField(b, "bootstrap_port"); err != nil {
		return p, err
	} else if ok {
		if n < 1 || n > 65535 {
			return p, badField("bootstrap_port", "bootstrap_port "+strconv.Itoa(n)+" is outside [1,65535]")
		}
		port = n
	}
	p.bsAddr = joinHostPort(host, port)
	return p, nil
}

// joinHostPort joins a bootstrap_host (an IPv6 host may keep its brackets, as sgl-router sends
// it) and a port.
func joinHostPort(host string, port int) string {
	if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}
