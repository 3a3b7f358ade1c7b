package fakeworker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// KV-event wire shapes (Config.KVEventsShape).
const (
	// KVShapeArray is SGLang's tagged-array event shape (msgspec array_like structs, before
	// sglang PR #37482): ["BlockStored", hashes, parent, token_ids, block_size, lora_id, medium].
	KVShapeArray = "array"
	// KVShapeMap is the tagged-map shape of sglang PR #37482: {"type": "BlockStored",
	// "block_hashes": …, …}.
	KVShapeMap = "map"
)

// KVEventsConfig is SGLang's --kv-events-config (python/sglang/srt/utils/event_publisher.py
// KVEventsConfig, re-exported by disaggregation/kv_events.py), parsed from its JSON. Unknown
// fields are ignored, as pydantic does.
type KVEventsConfig struct {
	Publisher      string  `json:"publisher"`       // "zmq" or "null" (default: nothing published)
	Endpoint       string  `json:"endpoint"`        // PUB endpoint of rank 0, "tcp://host:port"; rank r uses port+r; default "tcp://*:5557"
	ReplayEndpoint *string `json:"replay_endpoint"` // ROUTER endpoint of rank 0 for replays (port+r per rank); nil: no replay
	BufferSteps    int     `json:"buffer_steps"`    // batches kept per rank for replay; default 10000
	HWM            int     `json:"hwm"`             // PUB high-water mark, in messages; default 100000
	MaxQueueSize   int     `json:"max_queue_size"`  // batches queued per rank between the engine and the socket; full: dropped; default 100000
	Topic          string  `json:"topic"`           // first frame of every message; default ""
}

// SGLang's KVEventsConfig defaults.
const (
	defaultKVEndpoint     = "tcp://*:5557"
	defaultKVBufferSteps  = 10_000
	defaultKVHWM          = 100_000
	defaultKVMaxQueueSize = 100_000
)

// ParseKVEventsConfig parses --kv-events-config JSON and fills SGLang's defaults. Errors name
// the flag and the field at fault.
func ParseKVEventsConfig(s string) (KVEventsConfig, error) {
	c := KVEventsConfig{Publisher: "null", Endpoint: defaultKVEndpoint, BufferSteps: defaultKVBufferSteps,
		HWM: defaultKVHWM, MaxQueueSize: defaultKVMaxQueueSize}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("fakeworker: --kv-events-config is not a JSON object of SGLang's KVEventsConfig: %w", err)
	}
	switch c.Publisher {
	case "null", "zmq":
	default:
		return c, fmt.Errorf("fakeworker: --kv-events-config publisher %q is not \"zmq\" or \"null\"", c.Publisher)
	}
	if c.Publisher == "null" {
		return c, nil
	}
	if _, _, err := splitTCPEndpoint(c.Endpoint); err != nil {
		return c, fmt.Errorf("fakeworker: --kv-events-config endpoint: %w", err)
	}
	if c.ReplayEndpoint != nil {
		if _, _, err := splitTCPEndpoint(*c.ReplayEndpoint); err != nil {
			return c, fmt.Errorf("fakeworker: --kv-events-config replay_endpoint: %w", err)
		}
	}
	switch {
	case c.BufferSteps < 1:
		return c, fmt.Errorf("fakeworker: --kv-events-config buffer_steps %d must be ≥ 1", c.BufferSteps)
	case c.HWM < 0:
		return c, fmt.Errorf("fakeworker: --kv-events-config hwm %d must not be negative", c.HWM)
	case c.MaxQueueSize < 1:
		return c, fmt.Errorf("fakeworker: --kv-events-config max_queue_size %d must be ≥ 1", c.MaxQueueSize)
	}
	return c, nil
}

// enabled reports whether events are published.
func (c KVEventsConfig) enabled() bool { return c.Publisher == "zmq" }

// splitTCPEndpoint splits "tcp://host:port" (host may be "*" or a bracketed IPv6 literal).
// fakeworker supports tcp only (SGLang also takes ipc:// and inproc://).
func splitTCPEndpoint(ep string) (host string, port int, err error) {
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return "", 0, fmt.Errorf("%q is not a tcp://host:port endpoint", ep)
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("%q has no port", ep)
	}
	host = rest[:i]
	port, err = strconv.Atoi(rest[i+1:])
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port %q is not in [0,65535]", ep, rest[i+1:])
	}
	if host == "" {
		return "", 0, fmt.Errorf("%q has no host", ep)
	}
	return host, port, nil
}

// wildcardHost reports whether SGLang binds (rather than connects) an endpoint with this host:
// "*", "::" or "0.0.0.0" (event_publisher.py ZmqEventPublisher._socket_setup).
func wildcardHost(host string) bool {
	return host == "*" || strings.Contains(host, "::") || host == "0.0.0.0"
}

// tcpEndpoint joins a host (as written in an endpoint) and a port.
func tcpEndpoint(host string, port int) string {
	if strings.HasPrefix(host, "[") || !strings.Contains(host, ":") {
		return "tcp://" + host + ":" + strconv.Itoa(port)
	}
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// shiftKVEventPorts returns raw (--kv-events-config) with its endpoint and replay_endpoint
// ports moved up by off (port 0 stays 0), so the workers of a local cluster do not collide.
func shiftKVEventPorts(raw string, off int) (string, error) {
	c, err := ParseKVEventsConfig(raw)
	if err != nil || !c.enabled() || off == 0 {
		return raw, err
	}
	shift := func(ep string) string {
		host, port, _ := splitTCPEndpoint(ep)
		if port == 0 {
			return ep
		}
		return tcpEndpoint(host, port+off)
	}
	c.Endpoint = shift(c.Endpoint)
	if c.ReplayEndpoint != nil {
		r := shift(*c.ReplayEndpoint)
		c.ReplayEndpoint = &r
	}
	b, err := json.Marshal(c)
	return string(b), err
}
