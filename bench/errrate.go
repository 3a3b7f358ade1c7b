package bench

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pdrouter/pdrouter/reports"
)

// LevelErrors is one level whose failed requests exceed Config.MaxErrorRate: how many failed,
// by kind, with the first message seen of each kind.
type LevelErrors struct {
	Label    string
	Requests int
	Errors   int
	// Kinds maps an error kind (reports.ErrorKind: timeout, connection, http_401, …) to its
	// count; Examples maps it to the first message of that kind.
	Kinds    map[string]int
	Examples map[string]string
}

// ErrorRateError is Run's error when levels failed more requests than Config.MaxErrorRate
// allows. Run still returns the results of every level with it.
type ErrorRateError struct {
	MaxErrorRate float64
	Levels       []LevelErrors
}

// Error names each failing level, its error rate and, per kind, the count and first message,
// so the cause shows on stderr without opening requests.jsonl.
func (e *ErrorRateError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "bench: %d level(s) failed more than --max-error-rate %g of their requests", len(e.Levels), e.MaxErrorRate)
	for _, l := range e.Levels {
		fmt.Fprintf(&b, "\n  level %s: %d of %d requests failed (%.1f%%)", l.Label, l.Errors, l.Requests,
			100*float64(l.Errors)/float64(max(l.Requests, 1)))
		kinds := make([]string, 0, len(l.Kinds))
		for k := range l.Kinds {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		for _, k := range kinds {
			fmt.Fprintf(&b, "\n    %s ×%d, first: %s", k, l.Kinds[k], l.Examples[k])
		}
	}
	return b.String()
}

// checkErrorRate returns the levels of res whose error fraction exceeds limit (nil when none,
// or when limit is negative). examples holds the first message per kind of each level.
func checkErrorRate(res *reports.Results, limit float64, examples map[string]map[string]string) error {
	if limit < 0 || res == nil {
		return nil
	}
	e := &ErrorRateError{MaxErrorRate: limit}
	for _, l := range res.Levels {
		if l.Errors == 0 || float64(l.Errors) <= limit*float64(l.Requests) {
			continue
		}
		e.Levels = append(e.Levels, LevelErrors{Label: l.Label, Requests: l.Requests, Errors: l.Errors,
			Kinds: l.ErrorsByKind, Examples: examples[l.Label]})
	}
	if len(e.Levels) == 0 {
		return nil
	}
	return e
}
