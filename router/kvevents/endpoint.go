package kvevents

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Endpoint is one publisher to subscribe to: an attention-DP rank of a worker.
type Endpoint struct {
	// Target is the router target the events feed: "url@rank" when the router is DP-aware,
	// the worker URL otherwise — the names router.TargetName gives.
	Target string
	Rank   int    // the attention-DP rank (0 without DP)
	Pub    string // the PUB address to dial, "tcp://host:port"
	Replay string // the replay ROUTER address, "" when the publisher has none
	Topic  string // the SUB topic filter ("" subscribes to everything)
}

// ErrDisabled is returned (wrapped) by the endpoint helpers when a worker publishes no KV
// events: no config, publisher "null", or a null /server_info kv_events block.
var ErrDisabled = errors.New("kv events are not published")

// Config is SGLang's --kv-events-config JSON (sglang python/sglang/srt/utils/event_publisher.py
// KVEventsConfig, re-exported by disaggregation/kv_events.py). Unknown keys are ignored.
type Config struct {
	Publisher      string `json:"publisher"`       // "zmq"; "null" (SGLang's default) publishes nothing
	Endpoint       string `json:"endpoint"`        // PUB address of rank 0, default "tcp://*:5557"
	ReplayEndpoint string `json:"replay_endpoint"` // ROUTER address of rank 0; "" for none
	Topic          string `json:"topic"`
	BufferSteps    int    `json:"buffer_steps"` // batches kept for replay (SGLang's default 10000)
	HWM            int    `json:"hwm"`
}

// ParseConfig parses a --kv-events-config value, filling SGLang's defaults (endpoint
// "tcp://*:5557", publisher "null").
func ParseConfig(s string) (Config, error) {
	c := Config{Publisher: "null", Endpoint: "tcp://*:5557", BufferSteps: 10_000, HWM: 100_000}
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return Config{}, fmt.Errorf("kvevents: --kv-events-config: %w", err)
	}
	return c, nil
}

// Endpoints returns one endpoint per rank of a worker. dpSize is the worker's DP size as the
// router addresses it (router.Worker.DPSize: 0 when the router is not DP-aware, giving one
// endpoint, rank 0, named by the URL). Each rank publishes at the configured port + rank, the
// replay socket likewise (event_publisher.py ZmqEventPublisher.offset_endpoint_port); a wildcard
// host is replaced by the worker URL's host.
func (c Config) Endpoints(workerURL string, dpSize int) ([]Endpoint, error) {
	switch c.Publisher {
	case "zmq":
	case "", "null":
		return nil, fmt.Errorf("kvevents: --kv-events-config publisher %q: %w", c.Publisher, ErrDisabled)
	default:
		return nil, fmt.Errorf("kvevents: --kv-events-config publisher %q is not supported (want zmq)", c.Publisher)
	}
	host, err := workerHost(workerURL)
	if err != nil {
		return nil, err
	}
	pubHost, pubPort, err := splitTCP(c.Endpoint, "endpoint")
	if err != nil {
		return nil, err
	}
	var repHost string
	repPort := -1
	if c.ReplayEndpoint != "" {
		if repHost, repPort, err = splitTCP(c.ReplayEndpoint, "replay_endpoint"); err != nil {
			return nil, err
		}
	}
	eps := make([]Endpoint, 0, max(dpSize, 1))
	for rank := range max(dpSize, 1) {
		ep := Endpoint{Target: targetName(workerURL, rank, dpSize), Rank: rank, Topic: c.Topic,
			Pub: tcpAddr(dialHost(pubHost, host), pubPort+rank)}
		if repPort >= 0 {
			ep.Replay = tcpAddr(dialHost(repHost, host), repPort+rank)
		}
		eps = append(eps, ep)
	}
	return eps, nil
}

// ServerInfo is the part of a worker's /server_info this package reads: the structured
// kv_events block (sglang PR #25844, describe_kv_events_publisher in server_args: publisher,
// endpoint_host, endpoint_port_base, topic, block_size, dp_size) and the raw
// kv_events_config string /server_info carries with every other server argument, the only
// place the replay endpoint is advertised.
type ServerInfo struct {
	KVEvents       *KVEventsInfo `json:"kv_events"`
	KVEventsConfig string        `json:"kv_events_config"`
}

// KVEventsInfo is /server_info's kv_events block.
type KVEventsInfo struct {
	Publisher        string `json:"publisher"`
	EndpointHost     string `json:"endpoint_host"` // may be a wildcard: dial the worker URL's host
	EndpointPortBase int    `json:"endpoint_port_base"`
	Topic            string `json:"topic"`
	BlockSize        int    `json:"block_size"` // the page size events are chunked at: hash requests at it
	DPSize           int    `json:"dp_size"`    // publishers, one per attention-DP rank
}

// ParseServerInfo reads the kv_events fields of a /server_info body.
func ParseServerInfo(body []byte) (ServerInfo, error) {
	var si ServerInfo
	if err := json.Unmarshal(body, &si); err != nil {
		return ServerInfo{}, fmt.Errorf("kvevents: /server_info: %w", err)
	}
	return si, nil
}

// Endpoints returns one endpoint per rank from the kv_events block (tcp://host:base+rank, the
// host the worker URL's when endpoint_host is a wildcard), with the replay endpoint taken from
// kv_events_config when it names one. dpSize is as for [Config.Endpoints]; a DP-aware router's
// dp size must match the block's dp_size, and a router that is not DP-aware cannot attribute
// the events of a worker with dp_size > 1 to its one target (an error: use --dp-aware).
func (si ServerInfo) Endpoints(workerURL string, dpSize int) ([]Endpoint, error) {
	kv := si.KVEvents
	if kv == nil {
		return nil, fmt.Errorf("kvevents: /server_info kv_events is null: %w", ErrDisabled)
	}
	if kv.Publisher != "" && kv.Publisher != "zmq" {
		return nil, fmt.Errorf("kvevents: /server_info kv_events.publisher %q is not supported (want zmq)", kv.Publisher)
	}
	if kv.EndpointPortBase <= 0 || kv.EndpointPortBase > 65535 {
		return nil, fmt.Errorf("kvevents: /server_info kv_events.endpoint_port_base %d is outside 1..65535", kv.EndpointPortBase)
	}
	ranks := max(kv.DPSize, 1)
	switch {
	case dpSize > 0 && kv.DPSize > 0 && dpSize != kv.DPSize:
		return nil, fmt.Errorf("kvevents: /server_info kv_events.dp_size %d differs from the worker's dp_size %d", kv.DPSize, dpSize)
	case dpSize == 0 && ranks > 1:
		return nil, fmt.Errorf("kvevents: /server_info kv_events.dp_size is %d: one publisher per rank cannot feed a single target (the router is not --dp-aware)", kv.DPSize)
	}
	host, err := workerHost(workerURL)
	if err != nil {
		return nil, err
	}
	var repHost string
	repPort := -1
	if si.KVEventsConfig != "" {
		c, err := ParseConfig(si.KVEventsConfig)
		if err != nil {
			return nil, fmt.Errorf("kvevents: /server_info kv_events_config: %w", err)
		}
		if c.ReplayEndpoint != "" {
			if repHost, repPort, err = splitTCP(c.ReplayEndpoint, "replay_endpoint"); err != nil {
				return nil, err
			}
		}
	}
	pubHost := dialHost(kv.EndpointHost, host)
	eps := make([]Endpoint, 0, ranks)
	for rank := range ranks {
		ep := Endpoint{Target: targetName(workerURL, rank, dpSize), Rank: rank, Topic: kv.Topic,
			Pub: tcpAddr(pubHost, kv.EndpointPortBase+rank)}
		if repPort >= 0 {
			ep.Replay = tcpAddr(dialHost(repHost, host), repPort+rank)
		}
		eps = append(eps, ep)
	}
	return eps, nil
}

// targetName mirrors router.TargetName (this package may not import router): url@rank when
// the router is DP-aware (dpSize > 0), else the URL.
func targetName(workerURL string, rank, dpSize int) string {
	if dpSize <= 0 {
		return workerURL
	}
	return workerURL + "@" + strconv.Itoa(rank)
}

func workerHost(workerURL string) (string, error) {
	u, err := url.Parse(workerURL)
	if err != nil || u.Hostname() == "" {
		return "", fmt.Errorf("kvevents: worker URL %q has no host", workerURL)
	}
	return u.Hostname(), nil
}

// isWildcard reports a bind-all host. SGLang binds its PUB when the endpoint holds "*" or
// "::" (and, since it advertises it as a wildcard in /server_info, "0.0.0.0"), and connects
// otherwise (event_publisher.py ZmqEventPublisher._socket_setup).
func isWildcard(h string) bool {
	switch h {
	case "", "*", "0.0.0.0", "::", "[::]":
		return true
	}
	return false
}

func dialHost(h, worker string) string {
	if isWildcard(h) {
		return worker
	}
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}

// splitTCP splits "tcp://host:port". A non-wildcard host in the config is an error: SGLang
// then connects to that address (the consumer must bind), so there is nothing to dial.
func splitTCP(ep, field string) (host string, port int, err error) {
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return "", 0, fmt.Errorf("kvevents: --kv-events-config %s %q is not a tcp:// address a router can reach", field, ep)
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("kvevents: --kv-events-config %s %q has no port", field, ep)
	}
	host = rest[:i]
	port, err = strconv.Atoi(rest[i+1:])
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("kvevents: --kv-events-config %s %q: port is not in 1..65535", field, ep)
	}
	if !isWildcard(host) {
		return "", 0, fmt.Errorf("kvevents: --kv-events-config %s %q: SGLang connects to a non-wildcard host instead of binding, so a subscriber cannot dial it (use tcp://*:PORT)", field, ep)
	}
	return host, port, nil
}

func tcpAddr(host string, port int) string {
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(port))
}
