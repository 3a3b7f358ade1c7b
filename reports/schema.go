package reports

import _ "embed" // the JSON Schemas below

// ResultsSchema is the JSON Schema (draft 2020-12) of results.json, schema/results.schema.json.
// Callers must not modify it.
//
//go:embed schema/results.schema.json
var ResultsSchema []byte

// RequestsSchema is the JSON Schema (draft 2020-12) of one requests.jsonl line,
// schema/requests.schema.json. Callers must not modify it.
//
//go:embed schema/requests.schema.json
var RequestsSchema []byte
