package router

import "time"

// Clock is the only way the router reads time.
type Clock interface {
	Now() time.Time
}

// ClockFunc adapts a function to [Clock], e.g. ClockFunc(time.Now) in the live server.
type ClockFunc func() time.Time

// Now returns f().
func (f ClockFunc) Now() time.Time { return f() }
