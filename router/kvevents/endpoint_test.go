package kvevents

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigEndpoints(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		config string
		url    string
		dp     int
		want   []Endpoint
		err    string
	}{
		{
			name:   "DP-aware dp 2, wildcard replaced, ports offset by rank, replay too",
			config: `{"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:6000","topic":"kv","hwm":5,"future":1}`,
			url:    "http://10.0.0.7:30000", dp: 2,
			want: []Endpoint{
				{Target: "http://10.0.0.7:30000@0", Rank: 0, Pub: "tcp://10.0.0.7:5557", Replay: "tcp://10.0.0.7:6000", Topic: "kv"},
				{Target: "http://10.0.0.7:30000@1", Rank: 1, Pub: "tcp://10.0.0.7:5558", Replay: "tcp://10.0.0.7:6001", Topic: "kv"},
			},
		},
		{
			name:   "not DP-aware: one endpoint named by the URL; default endpoint; IPv6 worker; 0.0.0.0",
			config: `{"publisher":"zmq","replay_endpoint":"tcp://0.0.0.0:5600"}`,
			url:    "http://[fd00::1]:30000", dp: 0,
			want: []Endpoint{{Target: "http://[fd00::1]:30000", Pub: "tcp://[fd00::1]:5557", Replay: "tcp://[fd00::1]:5600"}},
		},
		{name: "disabled by default", config: `{}`, url: "http://h:1", err: "not published"},
		{name: "other publisher", config: `{"publisher":"kafka"}`, url: "http://h:1", err: `publisher "kafka"`},
		{name: "connect mode", config: `{"publisher":"zmq","endpoint":"tcp://10.1.1.1:5557"}`, url: "http://h:1", err: "connects to a non-wildcard host"},
		{name: "ipc", config: `{"publisher":"zmq","endpoint":"ipc:///tmp/x"}`, url: "http://h:1", err: "endpoint \"ipc:///tmp/x\" is not a tcp://"},
		{name: "bad port", config: `{"publisher":"zmq","endpoint":"tcp://*:x"}`, url: "http://h:1", err: "port is not in"},
		{name: "bad replay", config: `{"publisher":"zmq","replay_endpoint":"tcp://*"}`, url: "http://h:1", err: "replay_endpoint \"tcp://*\" has no port"},
		{name: "no worker host", config: `{"publisher":"zmq"}`, url: "nohost", err: "worker URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := ParseConfig(tc.config)
			require.NoError(t, err)
			got, err := c.Endpoints(tc.url, tc.dp)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := ParseConfig(`{"publisher":`)
	assert.ErrorContains(t, err, "--kv-events-config")
	c, _ := ParseConfig(`{"publisher":"null"}`)
	_, err = c.Endpoints("http://h:1", 1)
	assert.True(t, errors.Is(err, ErrDisabled))
}

func TestServerInfoEndpoints(t *testing.T) {
	t.Parallel()
	body := `{"model_path":"m","kv_events_config":"{\"publisher\":\"zmq\",\"endpoint\":\"tcp://*:5557\",\"replay_endpoint\":\"tcp://*:5600\"}",
		"kv_events":{"publisher":"zmq","endpoint_host":"*","endpoint_port_base":5557,"topic":"","block_size":16,"dp_size":2,"load_topic":"load"}}`
	si, err := ParseServerInfo([]byte(body))
	require.NoError(t, err)
	require.NotNil(t, si.KVEvents)
	assert.Equal(t, 16, si.KVEvents.BlockSize)
	got, err := si.Endpoints("http://w1:30000", 2)
	require.NoError(t, err)
	assert.Equal(t, []Endpoint{
		{Target: "http://w1:30000@0", Rank: 0, Pub: "tcp://w1:5557", Replay: "tcp://w1:5600"},
		{Target: "http://w1:30000@1", Rank: 1, Pub: "tcp://w1:5558", Replay: "tcp://w1:5601"},
	}, got)

	// A concrete host is dialled as advertised; no kv_events_config: no replay.
	si, err = ParseServerInfo([]byte(`{"kv_events":{"publisher":"zmq","endpoint_host":"10.2.3.4","endpoint_port_base":7000,"topic":"kv","block_size":4,"dp_size":1}}`))
	require.NoError(t, err)
	got, err = si.Endpoints("http://w1:30000", 0)
	require.NoError(t, err)
	assert.Equal(t, []Endpoint{{Target: "http://w1:30000", Pub: "tcp://10.2.3.4:7000", Topic: "kv"}}, got)

	for _, tc := range []struct{ body, err string }{
		{`{"kv_events":null}`, "not published"},
		{`{"kv_events":{"publisher":"zmq","endpoint_host":"*","endpoint_port_base":0,"dp_size":1}}`, "endpoint_port_base 0"},
		{`{"kv_events":{"publisher":"zmq","endpoint_host":"*","endpoint_port_base":5557,"dp_size":4}}`, "dp_size 4 differs"},
		{`{"kv_events":{"publisher":"zmq","endpoint_host":"*","endpoint_port_base":5557,"dp_size":2}}`, "not --dp-aware"},
		{`{"kv_events_config":"{","kv_events":{"publisher":"zmq","endpoint_host":"*","endpoint_port_base":5557,"dp_size":2}}`, "kv_events_config"},
	} {
		si, err := ParseServerInfo([]byte(tc.body))
		require.NoError(t, err)
		dp := 2
		if tc.err == "not --dp-aware" {
			dp = 0
		}
		_, err = si.Endpoints("http://w1:30000", dp)
		assert.ErrorContains(t, err, tc.err, tc.body)
	}
	_, err = ParseServerInfo([]byte(`[`))
	assert.ErrorContains(t, err, "/server_info")
}
