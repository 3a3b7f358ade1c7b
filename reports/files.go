package reports

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// File names inside a results directory (--out DIR).
const (
	ResultsFile  = "results.json"
	RequestsFile = "requests.jsonl"
)

// EncodeResults validates r and writes it as indented JSON (two spaces, trailing newline),
// fields in SPEC §6 order and map keys sorted, so equal values give equal bytes. An empty
// r.Schema is written as SchemaVersion (r is not modified).
func EncodeResults(w io.Writer, r *Results) error {
	c := *r
	if c.Schema == "" {
		c.Schema = SchemaVersion
	}
	if c.Levels == nil {
		c.Levels = []Level{}
	}
	if err := c.Validate(); err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(&c); err != nil {
		return fmt.Errorf("reports: encode results: %w", err)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("reports: write results: %w", err)
	}
	return nil
}

// DecodeResults reads one results.json document, rejecting unknown fields, trailing data and
// documents that fail Results.Validate. Raw JSON in Meta comes back compact, empty maps and
// lists as nil.
func DecodeResults(rd io.Reader) (*Results, error) {
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	var r Results
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("reports: decode results: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("reports: decode results: data after the JSON document")
	}
	if err := r.normalize(); err != nil {
		return nil, fmt.Errorf("reports: decode results: %w", err)
	}
	if len(r.Levels) == 0 {
		r.Levels = nil
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// ReadResults reads a results file; path may be the file or the directory holding
// results.json.
func ReadResults(path string) (*Results, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, ResultsFile)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reports: %w", err)
	}
	defer f.Close()
	r, err := DecodeResults(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// WriteDir creates dir (and parents) if needed and writes dir/results.json and
// dir/requests.jsonl (records in the given order). It validates the results and every record
// before writing anything; each file is written to a temporary name and renamed, so a reader
// never sees half a file.
func WriteDir(dir string, r *Results, records []Record) error {
	// Check everything first so that invalid input leaves no file behind.
	c := *r
	if c.Schema == "" {
		c.Schema = SchemaVersion
	}
	if err := c.Validate(); err != nil {
		return err
	}
	for i := range records {
		if err := records[i].Validate(); err != nil {
			return err
		}
	}
	if err := WriteResults(dir, r); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, RequestsFile), func(w io.Writer) error {
		rw := NewRecordWriter(w)
		for i := range records {
			if err := rw.Write(&records[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// WriteResults creates dir (and parents) if needed and writes dir/results.json alone, through
// a temporary file and a rename; for the bench, which streams requests.jsonl with a
// RecordWriter while it runs.
func WriteResults(dir string, r *Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("reports: %w", err)
	}
	return writeFile(filepath.Join(dir, ResultsFile), func(w io.Writer) error {
		return EncodeResults(w, r)
	})
}

// ReadDir reads dir/results.json and dir/requests.jsonl. Only tests call it (bench's and
// cmd/router's read the directory a run wrote); it is here, beside WriteResults, so that they
// read a run as the package writes it.
func ReadDir(dir string) (*Results, []Record, error) {
	r, err := ReadResults(filepath.Join(dir, ResultsFile))
	if err != nil {
		return nil, nil, err
	}
	recs, err := ReadRecords(filepath.Join(dir, RequestsFile))
	if err != nil {
		return nil, nil, err
	}
	return r, recs, nil
}

// writeFile writes path through a temporary file in the same directory and renames it.
func writeFile(path string, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("reports: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	bw := bufio.NewWriter(f)
	if err = write(bw); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err = bw.Flush(); err != nil {
		return fmt.Errorf("reports: %w", err)
	}
	if err = f.Chmod(0o644); err != nil {
		return fmt.Errorf("reports: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("reports: %w", err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("reports: %w", err)
	}
	return nil
}

// RecordWriter streams records as requests.jsonl: each Write validates one record and writes
// it as one line in a single Write call on the underlying writer (no buffering here, so a
// crash loses at most the line being written). Safe for concurrent use.
type RecordWriter struct {
	mu  sync.Mutex // protects buf, n and writes to w
	w   io.Writer
	buf bytes.Buffer
	n   int
}

// NewRecordWriter returns a RecordWriter writing to w.
func NewRecordWriter(w io.Writer) *RecordWriter { return &RecordWriter{w: w} }

// Write writes r as one line.
func (rw *RecordWriter) Write(r *Record) error {
	if err := r.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("reports: encode record %q: %w", r.ID, err)
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.buf.Reset()
	rw.buf.Write(b)
	rw.buf.WriteByte('\n')
	if _, err := rw.w.Write(rw.buf.Bytes()); err != nil {
		return fmt.Errorf("reports: write record %q: %w", r.ID, err)
	}
	rw.n++
	return nil
}

// RecordReader reads requests.jsonl one record at a time. Blank lines are skipped; lines may be
// of any length. Not safe for concurrent use.
type RecordReader struct {
	r    *bufio.Reader
	line int
}

// NewRecordReader returns a RecordReader reading from r.
func NewRecordReader(r io.Reader) *RecordReader {
	return &RecordReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the next record, or io.EOF after the last one. A bad line gives an error
// naming its line number (1-based); reading may continue after it.
func (rr *RecordReader) Next() (Record, error) {
	for {
		b, err := rr.r.ReadBytes('\n')
		if len(b) == 0 && err != nil {
			if err == io.EOF {
				return Record{}, io.EOF
			}
			return Record{}, fmt.Errorf("reports: requests.jsonl line %d: %w", rr.line+1, err)
		}
		rr.line++
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var rec Record
		if err := dec.Decode(&rec); err != nil {
			return Record{}, fmt.Errorf("reports: requests.jsonl line %d: %w", rr.line, err)
		}
		if dec.More() {
			return Record{}, fmt.Errorf("reports: requests.jsonl line %d: more than one JSON value", rr.line)
		}
		rec.normalize()
		if err := rec.Validate(); err != nil {
			return Record{}, fmt.Errorf("requests.jsonl line %d: %w", rr.line, err)
		}
		return rec, nil
	}
}

// DecodeRecords reads every record from r; it stops at the first bad line.
func DecodeRecords(r io.Reader) ([]Record, error) {
	rr := NewRecordReader(r)
	var out []Record
	for {
		rec, err := rr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
}

// ReadRecords reads a requests.jsonl file; path may be the file or the directory holding it.
func ReadRecords(path string) ([]Record, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, RequestsFile)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reports: %w", err)
	}
	defer f.Close()
	recs, err := DecodeRecords(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return recs, nil
}
