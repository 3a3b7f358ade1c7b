package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/pdrouter/pdrouter/router"
)

// Worker URLs may carry credentials (http://user:pw@host: Go's client sends them as Basic
// auth). They are kept as given to reach the worker and shown nowhere: every view names a
// worker by router.RedactURL, free text (transport errors, probe causes) goes through
// router.RedactIn, and, as a last line, every log record through redactHandler.

// redactedError is err with the credentials of url hidden from its text; errors.Is and
// errors.As still see err.
type redactedError struct {
	err error
	url string
}

func redactErr(err error, url string) error {
	if err == nil {
		return nil
	}
	return &redactedError{err: err, url: url}
}

func (e *redactedError) Error() string { return router.RedactIn(e.err.Error(), e.url) }
func (e *redactedError) Unwrap() error { return e.err }

// redactPath hides the credentials of a worker URL in a request path
// (/workers/http://user:pw@host, raw or percent-encoded), for the access log.
func redactPath(p string) string {
	rest, ok := strings.CutPrefix(p, "/workers/")
	if !ok || !strings.Contains(rest, "@") {
		return p
	}
	if strings.Contains(rest, "://") {
		return "/workers/" + router.RedactText(rest)
	}
	// A client's path cleaning may have made "http://" "http:/", or the scheme is missing:
	// everything before the host is user info.
	at := strings.LastIndex(rest, "@")
	if strings.Trim(rest[at+1:], "0123456789") == "" { // url@rank
		if at = strings.LastIndex(rest[:at], "@"); at < 0 {
			return p
		}
	}
	scheme := ""
	if i := strings.Index(rest[:at], ":/"); i >= 0 {
		scheme = rest[:i+2]
	}
	return "/workers/" + scheme + router.Redacted + rest[at:]
}

// redactHandler is a slog.Handler that hides URL credentials in the message and in every
// string, error and Stringer attribute before handing the record on: whatever a log line
// quotes (a cause, a reason, an error), no user info reaches the log.
type redactHandler struct{ next slog.Handler }

func newRedactLogger(l *slog.Logger) *slog.Logger {
	if _, ok := l.Handler().(redactHandler); ok {
		return l
	}
	return slog.New(redactHandler{l.Handler()})
}

func (h redactHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h redactHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, router.RedactText(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h redactHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = redactAttr(a)
	}
	return redactHandler{h.next.WithAttrs(red)}
}

func (h redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{h.next.WithGroup(name)}
}

func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); strings.Contains(s, "@") {
			a.Value = slog.StringValue(router.RedactText(s))
		}
	case slog.KindGroup:
		g := v.Group()
		red := make([]slog.Attr, len(g))
		for i, ga := range g {
			red[i] = redactAttr(ga)
		}
		a.Value = slog.GroupValue(red...)
	case slog.KindAny:
		var s string
		switch x := v.Any().(type) {
		case error:
			s = x.Error()
		case fmt.Stringer:
			s = x.String()
		default: // e.g. a list of URLs: replaced by its text only when that held credentials
			s = fmt.Sprint(x)
		}
		if r := router.RedactText(s); r != s {
			a.Value = slog.StringValue(r)
		}
	}
	return a
}
