package reports

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// jsonSchema is a small JSON Schema (draft 2020-12) validator covering exactly the keywords
// our schema files use: type (names and arrays, for nullable fields), properties, required,
// additionalProperties (false or a schema), items, enum, const, minimum, maximum,
// exclusiveMinimum, minLength, pattern, anyOf and local $ref into $defs. Annotations ($schema,
// $id, $defs, title, description, format) are ignored; any other keyword is an error, so the
// schema cannot silently rely on something this validator does not check.
type jsonSchema struct {
	root any
}

var annotationKeywords = []string{"$schema", "$id", "$defs", "title", "description", "format"}

func newJSONSchema(t testing.TB, src []byte) *jsonSchema {
	t.Helper()
	root, err := decodeJSON(src)
	require.NoError(t, err)
	s := &jsonSchema{root: root}
	require.NoError(t, s.checkKeywords(root, "#"), "schema uses a keyword the test validator does not implement")
	return s
}

// decodeJSON decodes one JSON value keeping numbers exact (json.Number).
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("data after the JSON value")
	}
	return v, nil
}

var knownKeywords = append([]string{"$ref", "type", "properties", "required", "additionalProperties",
	"items", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "minLength", "pattern", "anyOf"},
	annotationKeywords...)

// checkKeywords walks every subschema and rejects unknown keywords.
func (s *jsonSchema) checkKeywords(sch any, path string) error {
	m, ok := sch.(map[string]any)
	if !ok {
		if _, isBool := sch.(bool); isBool {
			return nil
		}
		return fmt.Errorf("%s: a schema must be an object or a boolean", path)
	}
	for k, v := range m {
		if !slices.Contains(knownKeywords, k) {
			return fmt.Errorf("%s: unsupported keyword %q", path, k)
		}
		switch k {
		case "properties", "$defs":
			for name, sub := range v.(map[string]any) {
				if err := s.checkKeywords(sub, path+"/"+k+"/"+name); err != nil {
					return err
				}
			}
		case "items", "additionalProperties":
			if err := s.checkKeywords(v, path+"/"+k); err != nil {
				return err
			}
		case "anyOf":
			for i, sub := range v.([]any) {
				if err := s.checkKeywords(sub, fmt.Sprintf("%s/anyOf/%d", path, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Validate checks one JSON document.
func (s *jsonSchema) Validate(doc []byte) error {
	v, err := decodeJSON(doc)
	if err != nil {
		return err
	}
	return s.validate(s.root, v, "$")
}

func (s *jsonSchema) resolve(ref string) (any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("unsupported $ref %q", ref)
	}
	cur := s.root
	for _, tok := range strings.Split(ref[2:], "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("$ref %q does not resolve", ref)
		}
		if cur, ok = m[tok]; !ok {
			return nil, fmt.Errorf("$ref %q does not resolve", ref)
		}
	}
	return cur, nil
}

func typeOf(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if r, ok := new(big.Rat).SetString(v.String()); ok && r.IsInt() {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	panic(fmt.Sprintf("unexpected JSON value %T", v))
}

func hasType(v any, want string) bool {
	got := typeOf(v)
	return got == want || (want == "number" && got == "integer")
}

// jsonEqual compares two decoded JSON values, numbers by value.
func jsonEqual(a, b any) bool {
	na, aNum := a.(json.Number)
	nb, bNum := b.(json.Number)
	if aNum || bNum {
		if !aNum || !bNum {
			return false
		}
		ra, _ := new(big.Rat).SetString(na.String())
		rb, _ := new(big.Rat).SetString(nb.String())
		return ra.Cmp(rb) == 0
	}
	switch a := a.(type) {
	case []any:
		bb, ok := b.([]any)
		if !ok || len(a) != len(bb) {
			return false
		}
		for i := range a {
			if !jsonEqual(a[i], bb[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		bb, ok := b.(map[string]any)
		if !ok || len(a) != len(bb) {
			return false
		}
		for k, v := range a {
			if w, ok := bb[k]; !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	}
	return a == b
}

func num2rat(v any) *big.Rat {
	r, _ := new(big.Rat).SetString(v.(json.Number).String())
	return r
}

func (s *jsonSchema) validate(sch, v any, path string) error {
	if b, ok := sch.(bool); ok {
		if !b {
			return fmt.Errorf("%s: not allowed", path)
		}
		return nil
	}
	m := sch.(map[string]any)
	if ref, ok := m["$ref"].(string); ok {
		target, err := s.resolve(ref)
		if err != nil {
			return err
		}
		if err := s.validate(target, v, path); err != nil {
			return err
		}
	}
	if t, ok := m["type"]; ok {
		var types []string
		switch t := t.(type) {
		case string:
			types = []string{t}
		case []any:
			for _, x := range t {
				types = append(types, x.(string))
			}
		}
		if !slices.ContainsFunc(types, func(want string) bool { return hasType(v, want) }) {
			return fmt.Errorf("%s: type %s, want %v", path, typeOf(v), types)
		}
	}
	if c, ok := m["const"]; ok && !jsonEqual(c, v) {
		return fmt.Errorf("%s: %v, want const %v", path, v, c)
	}
	if e, ok := m["enum"]; ok && !slices.ContainsFunc(e.([]any), func(x any) bool { return jsonEqual(x, v) }) {
		return fmt.Errorf("%s: %v is not one of %v", path, v, e)
	}
	if any_, ok := m["anyOf"]; ok {
		var errs []string
		for _, sub := range any_.([]any) {
			err := s.validate(sub, v, path)
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err.Error())
		}
		if errs != nil {
			return fmt.Errorf("%s: matches no anyOf branch (%s)", path, strings.Join(errs, "; "))
		}
	}
	switch typeOf(v) {
	case "integer", "number":
		x := num2rat(v)
		if min, ok := m["minimum"]; ok && x.Cmp(num2rat(min)) < 0 {
			return fmt.Errorf("%s: %v is below the minimum %v", path, v, min)
		}
		if max, ok := m["maximum"]; ok && x.Cmp(num2rat(max)) > 0 {
			return fmt.Errorf("%s: %v is above the maximum %v", path, v, max)
		}
		if min, ok := m["exclusiveMinimum"]; ok && x.Cmp(num2rat(min)) <= 0 {
			return fmt.Errorf("%s: %v is not above the exclusive minimum %v", path, v, min)
		}
	case "string":
		str := v.(string)
		if n, ok := m["minLength"]; ok && int64(utf8.RuneCountInString(str)) < num2rat(n).Num().Int64() {
			return fmt.Errorf("%s: %q is shorter than %v", path, str, n)
		}
		if p, ok := m["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			return fmt.Errorf("%s: %q does not match %s", path, str, p)
		}
	case "array":
		if items, ok := m["items"]; ok {
			for i, x := range v.([]any) {
				if err := s.validate(items, x, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	case "object":
		obj := v.(map[string]any)
		if req, ok := m["required"]; ok {
			for _, k := range req.([]any) {
				if _, ok := obj[k.(string)]; !ok {
					return fmt.Errorf("%s: missing required property %q", path, k)
				}
			}
		}
		props, _ := m["properties"].(map[string]any)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys) // deterministic first error
		for _, k := range keys {
			if sub, ok := props[k]; ok {
				if err := s.validate(sub, obj[k], path+"."+k); err != nil {
					return err
				}
			} else if ap, ok := m["additionalProperties"]; ok {
				if err := s.validate(ap, obj[k], path+"."+k); err != nil {
					return fmt.Errorf("%s: additional property %q: %w", path, k, err)
				}
			}
		}
	}
	return nil
}

func validateJSONL(s *jsonSchema, data []byte) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for n := 1; sc.Scan(); n++ {
		if err := s.Validate(sc.Bytes()); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
	}
	return sc.Err()
}

// The schemas declare draft 2020-12, the draft their docs name.
func TestSchemaFilesAreDraft2020(t *testing.T) {
	t.Parallel()
	for file, embedded := range map[string][]byte{"results.schema.json": resultsSchema, "requests.schema.json": requestsSchema} {
		var m map[string]any
		require.NoError(t, json.Unmarshal(embedded, &m), file)
		assert.Equal(t, "https://json-schema.org/draft/2020-12/schema", m["$schema"], file)
	}
}

// The pattern in both schema files is the one Go uses for labels.
func TestSchemaLabelPatternMatchesCode(t *testing.T) {
	t.Parallel()
	var res struct {
		Defs struct {
			Label struct{ Pattern string } `json:"label"`
		} `json:"$defs"`
	}
	require.NoError(t, json.Unmarshal(resultsSchema, &res))
	var req struct {
		Properties struct {
			Level struct{ Pattern string } `json:"level"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(requestsSchema, &req))
	assert.Equal(t, labelRE.String(), res.Defs.Label.Pattern)
	assert.Equal(t, labelRE.String(), req.Properties.Level.Pattern)
}

func TestSchemaAcceptsWrittenFiles(t *testing.T) {
	t.Parallel()
	rs, qs := newJSONSchema(t, resultsSchema), newJSONSchema(t, requestsSchema)
	for name, res := range map[string]*Results{"bench": fixtureResults(t), "sim": fixtureSimResults(t),
		"empty": {Meta: Meta{Tool: ToolSim, Workload: Workload{Name: "random"}}}} {
		t.Run("results/"+name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, EncodeResults(&buf, res))
			require.NoError(t, rs.Validate(buf.Bytes()))
		})
	}
	t.Run("requests", func(t *testing.T) {
		var buf bytes.Buffer
		w := NewRecordWriter(&buf)
		for _, r := range fixtureRecords() {
			require.NoError(t, w.Write(&r))
		}
		require.NoError(t, validateJSONL(qs, buf.Bytes()))
	})
}

// mutate decodes doc, applies f to the decoded value and re-encodes it.
func mutate(t *testing.T, doc []byte, f func(m map[string]any)) []byte {
	t.Helper()
	v, err := decodeJSON(doc)
	require.NoError(t, err)
	f(v.(map[string]any))
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func obj(v any) map[string]any { return v.(map[string]any) }

func firstLevel(m map[string]any) map[string]any { return obj(m["levels"].([]any)[0]) }

func TestSchemaRejectsWrongResults(t *testing.T) {
	t.Parallel()
	s := newJSONSchema(t, resultsSchema)
	var buf bytes.Buffer
	require.NoError(t, EncodeResults(&buf, fixtureResults(t)))
	good := buf.Bytes()
	require.NoError(t, s.Validate(good))

	tests := []struct {
		name string
		f    func(m map[string]any)
		want string // part of the error
	}{
		{"missing schema", func(m map[string]any) { delete(m, "schema") }, `missing required property "schema"`},
		{"wrong schema version", func(m map[string]any) { m["schema"] = "pdrouter.results/v2" }, "want const"},
		{"extra top-level field", func(m map[string]any) { m["extra"] = 1 }, `additional property "extra"`},
		{"tool not in enum", func(m map[string]any) { obj(m["meta"])["tool"] = "vegeta" }, "is not one of"},
		{"seed not an integer", func(m map[string]any) { obj(m["meta"])["seed"] = json.Number("1.5") }, "type number, want [integer]"},
		{"missing target (null is required, not absence)", func(m map[string]any) { delete(obj(m["meta"]), "target") }, `missing required property "target"`},
		{"workload without name", func(m map[string]any) { delete(obj(obj(m["meta"])["workload"]), "name") }, `missing required property "name"`},
		{"router not an object", func(m map[string]any) { obj(m["meta"])["router"] = "pd" }, "type string"},
		{"level missing goodput", func(m map[string]any) { delete(firstLevel(m), "goodput") }, `missing required property "goodput"`},
		{"level extra field", func(m map[string]any) { firstLevel(m)["p99"] = 1 }, `additional property "p99"`},
		{"bad label", func(m map[string]any) { firstLevel(m)["label"] = "c02" }, "does not match"},
		{"requests negative", func(m map[string]any) { firstLevel(m)["requests"] = json.Number("-1") }, "below the minimum"},
		{"requests a string", func(m map[string]any) { firstLevel(m)["requests"] = "4" }, "type string, want [integer]"},
		{"concurrency zero", func(m map[string]any) { firstLevel(m)["concurrency"] = json.Number("0") }, "below the minimum"},
		{"rate zero", func(m map[string]any) { obj(m["levels"].([]any)[1])["rate"] = json.Number("0") }, "exclusive minimum"},
		{"arrival unknown", func(m map[string]any) { firstLevel(m)["arrival"] = "uniform" }, "is not one of"},
		{"stats missing p90", func(m map[string]any) { delete(obj(firstLevel(m)["ttft_ms"]), "p90") }, `missing required property "p90"`},
		{"stats null (only queue_ms may be)", func(m map[string]any) { firstLevel(m)["ttft_ms"] = nil }, "type null, want [object]"},
		{"queue_ms a number", func(m map[string]any) { firstLevel(m)["queue_ms"] = json.Number("3") }, "matches no anyOf branch"},
		{"errors_by_kind value zero", func(m map[string]any) {
			obj(m["levels"].([]any)[1])["errors_by_kind"] = map[string]any{"timeout": json.Number("0")}
		}, "below the minimum"},
		{"goodput above 1", func(m map[string]any) { firstLevel(m)["goodput"] = json.Number("1.5") }, "above the maximum"},
		{"throughput extra", func(m map[string]any) { obj(firstLevel(m)["throughput"])["tok_s"] = json.Number("1") }, `additional property "tok_s"`},
		{"sim object incomplete", func(m map[string]any) { firstLevel(m)["sim"] = map[string]any{"load_spread": json.Number("1")} }, "matches no anyOf branch"},
		{"levels not an array", func(m map[string]any) { m["levels"] = map[string]any{} }, "type object, want [array]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := s.Validate(mutate(t, good, tc.f))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestSchemaRejectsWrongRequests(t *testing.T) {
	t.Parallel()
	s := newJSONSchema(t, requestsSchema)
	good, err := json.Marshal(fixtureRecords()[0])
	require.NoError(t, err)
	require.NoError(t, s.Validate(good))

	tests := []struct {
		name string
		f    func(m map[string]any)
		want string
	}{
		{"missing error (null is required)", func(m map[string]any) { delete(m, "error") }, `missing required property "error"`},
		{"missing itl_ms", func(m map[string]any) { delete(m, "itl_ms") }, `missing required property "itl_ms"`},
		{"extra field", func(m map[string]any) { m["rid"] = "x" }, `additional property "rid"`},
		{"ttft a string", func(m map[string]any) { m["ttft_ms"] = "120" }, "type string, want [number null]"},
		{"itl null", func(m map[string]any) { m["itl_ms"] = nil }, "type null, want [array]"},
		{"itl item a string", func(m map[string]any) { m["itl_ms"] = []any{json.Number("1"), "2"} }, "$.itl_ms[1]: type string"},
		{"itl item negative", func(m map[string]any) { m["itl_ms"] = []any{json.Number("-1")} }, "below the minimum"},
		{"tokens fractional", func(m map[string]any) { m["output_tokens"] = json.Number("2.5") }, "want [integer]"},
		{"empty id", func(m map[string]any) { m["id"] = "" }, "shorter than"},
		{"bad level", func(m map[string]any) { m["level"] = "r2.50" }, "does not match"},
		{"targets missing regular", func(m map[string]any) { delete(obj(m["targets"]), "regular") }, `missing required property "regular"`},
		{"targets extra", func(m map[string]any) { obj(m["targets"])["encode"] = nil }, `additional property "encode"`},
		{"error an object", func(m map[string]any) { m["error"] = map[string]any{} }, "type object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := s.Validate(mutate(t, good, tc.f))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// The validator itself: each keyword accepts and rejects what it should.
func TestJSONSchemaValidatorKeywords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, schema, doc string
		ok                bool
	}{
		{"type integer accepts 3", `{"type":"integer"}`, `3`, true},
		{"type integer accepts 3.0", `{"type":"integer"}`, `3.0`, true},
		{"type integer rejects 3.5", `{"type":"integer"}`, `3.5`, false},
		{"type number accepts integer", `{"type":"number"}`, `3`, true},
		{"type array allows null", `{"type":["number","null"]}`, `null`, true},
		{"type array rejects string", `{"type":["number","null"]}`, `"x"`, false},
		{"const", `{"const":"a"}`, `"b"`, false},
		{"enum with null", `{"enum":["a",null]}`, `null`, true},
		{"minimum ignores null", `{"type":["number","null"],"minimum":0}`, `null`, true},
		{"minimum", `{"minimum":0}`, `-0.5`, false},
		{"maximum", `{"maximum":1}`, `1.0000001`, false},
		{"exclusiveMinimum", `{"exclusiveMinimum":0}`, `0`, false},
		{"pattern", `{"pattern":"^c[0-9]+$"}`, `"c12"`, true},
		{"minLength", `{"minLength":1}`, `""`, false},
		{"items", `{"items":{"type":"string"}}`, `["a",1]`, false},
		{"required", `{"required":["a"]}`, `{}`, false},
		{"additionalProperties false", `{"properties":{"a":true},"additionalProperties":false}`, `{"a":1,"b":2}`, false},
		{"additionalProperties schema", `{"additionalProperties":{"type":"integer"}}`, `{"a":1,"b":2}`, true},
		{"anyOf none", `{"anyOf":[{"type":"string"},{"type":"null"}]}`, `1`, false},
		{"$ref", `{"$defs":{"n":{"type":"null"}},"$ref":"#/$defs/n"}`, `0`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := newJSONSchema(t, []byte(tc.schema)).Validate([]byte(tc.doc))
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
	t.Run("unknown keyword", func(t *testing.T) {
		t.Parallel()
		root, err := decodeJSON([]byte(`{"properties":{"a":{"oneOf":[]}}}`))
		require.NoError(t, err)
		assert.ErrorContains(t, (&jsonSchema{root: root}).checkKeywords(root, "#"), `unsupported keyword "oneOf"`)
	})
}
