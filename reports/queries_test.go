package reports

import (
	_ "embed" // the JSON Schemas below
	"encoding/json"
	"fmt"
)

// What only the tests read: the JSON Schemas of the files a run writes, and a workload's
// parameters decoded one by one.

// resultsSchema is the JSON Schema (draft 2020-12) of results.json,
// schema/results.schema.json.
//
//go:embed schema/results.schema.json
var resultsSchema []byte

// requestsSchema is the JSON Schema (draft 2020-12) of one requests.jsonl line,
// schema/requests.schema.json.
//
//go:embed schema/requests.schema.json
var requestsSchema []byte

// param decodes parameter key into dst; it reports false when the parameter is absent.
func (w Workload) param(key string, dst any) (bool, error) {
	raw, ok := w.Params[key]
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return true, fmt.Errorf("reports: workload %q parameter %q: %w", w.Name, key, err)
	}
	return true, nil
}
