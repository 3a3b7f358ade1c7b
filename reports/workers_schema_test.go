package reports

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// A bench's meta.workers (each worker's /get_server_info) and meta.warnings pass the schema;
// a worker with an unknown role does not.
func TestSchemaAcceptsBenchWorkers(t *testing.T) {
	t.Parallel()
	rs := newJSONSchema(t, resultsSchema)
	res := fixtureResults(t)
	res.Meta.Workers = []WorkerInfo{
		{URL: "http://***@p:1", Role: "prefill", ServerInfo: json.RawMessage(`{"max_total_num_tokens":12000,"page_size":1}`)},
		{URL: "http://d:1", Role: "decode", Error: "connection refused"},
	}
	res.Meta.Warnings = []string{"worker http://d:1: /get_server_info: connection refused"}
	var buf bytes.Buffer
	require.NoError(t, EncodeResults(&buf, res))
	require.NoError(t, rs.Validate(buf.Bytes()))
	bad := mutate(t, buf.Bytes(), func(m map[string]any) {
		obj(obj(m["meta"])["workers"].([]any)[0])["role"] = "router"
	})
	require.Error(t, rs.Validate(bad))
}
