package server

import (
	"context"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router"
	"github.com/stretchr/testify/require"
)

// waitFor polls cond until it holds, for at most 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, cond, "the condition")
}

func TestAdmissionLimitQueueAndTimeout(t *testing.T) {
	t.Parallel()
	a := newAdmission(router.AdmissionConfig{MaxConcurrent: 2, QueueSize: 1}, time.Hour, nil)
	fire := make(chan time.Time)
	a.after = func(time.Duration) <-chan time.Time { return fire }
	ctx := context.Background()

	r1, err := a.acquire(ctx, anon())
	require.NoError(t, err)
	r2, err := a.acquire(ctx, anon())
	require.NoError(t, err)

	// The third waits in the queue; the fourth finds the queue full.
	got := make(chan error, 1)
	var r3 func()
	go func() {
		var err error
		r3, err = a.acquire(ctx, anon())
		got <- err
	}()
	waitFor(t, func() bool { _, w := a.inUse(); return w == 1 })
	_, err = a.acquire(ctx, anon())
	require.ErrorIs(t, err, ErrQueueFull)

	// A release admits the waiter; double release is harmless.
	r1()
	r1()
	require.NoError(t, <-got)
	running, waiting := a.inUse()
	require.Equal(t, 2, running)
	require.Equal(t, 0, waiting)

	// A waiter whose timer fires gets ErrQueueTimeout.
	go func() {
		_, err := a.acquire(ctx, anon())
		got <- err
	}()
	waitFor(t, func() bool { _, w := a.inUse(); return w == 1 })
	fire <- time.Time{}
	require.ErrorIs(t, <-got, ErrQueueTimeout)

	// A cancelled client leaves the queue.
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		_, err := a.acquire(cctx, anon())
		got <- err
	}()
	waitFor(t, func() bool { _, w := a.inUse(); return w == 1 })
	cancel()
	require.ErrorIs(t, <-got, context.Canceled)

	r2()
	r3()
	running, waiting = a.inUse()
	require.Zero(t, running)
	require.Zero(t, waiting)
}

func TestAdmissionZeroQueueRejectsAtOnce(t *testing.T) {
	t.Parallel()
	a := newAdmission(router.AdmissionConfig{MaxConcurrent: 1}, time.Hour, nil)
	r, err := a.acquire(context.Background(), anon())
	require.NoError(t, err)
	_, err = a.acquire(context.Background(), anon())
	require.ErrorIs(t, err, ErrQueueFull)
	r()
}

func TestAdmissionDisabled(t *testing.T) {
	t.Parallel()
	a := newAdmission(router.AdmissionConfig{MaxConcurrent: -1, QueueSize: 100}, time.Second, nil)
	require.Nil(t, a)
	for range 1000 {
		r, err := a.acquire(context.Background(), anon())
		require.NoError(t, err)
		defer r()
	}
	running, waiting := a.inUse()
	require.Zero(t, running+waiting)
}

// inUse returns the permits currently held and the requests waiting.
func (a *admission) inUse() (running, waiting int) {
	if a == nil {
		return 0, 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.core.Running(), a.waiting
}

func anon() *router.Ticket { return &router.Ticket{Tenant: router.TenantAnonymous} }

// A waiter pushed out of the full queue for another tenant's request is refused at once.
func TestAdmissionPushedOutWaiterIsRefused(t *testing.T) {
	t.Parallel()
	a := newAdmission(router.AdmissionConfig{MaxConcurrent: 1, QueueSize: 2}, time.Hour, nil)
	ctx := context.Background()
	r1, err := a.acquire(ctx, &router.Ticket{Tenant: "header:flood"})
	require.NoError(t, err)
	got := make(chan error, 3)
	var floodRelease func()
	go func() {
		var err error
		floodRelease, err = a.acquire(ctx, &router.Ticket{Tenant: "header:flood"})
		got <- err
	}()
	waitFor(t, func() bool { _, w := a.inUse(); return w == 1 })
	go func() {
		_, err := a.acquire(ctx, &router.Ticket{Tenant: "header:flood"})
		got <- err
	}()
	waitFor(t, func() bool { _, w := a.inUse(); return w == 2 })
	var calmRelease func()
	go func() {
		var err error
		calmRelease, err = a.acquire(ctx, &router.Ticket{Tenant: "header:calm"})
		got <- err
	}()
	require.ErrorIs(t, <-got, ErrQueueFull, "the flooder's last waiter made room")
	r1()
	require.NoError(t, <-got, "the calm request took the slot: flood had its share running")
	calmRelease()
	require.NoError(t, <-got, "then the flooder's first waiter")
	floodRelease()
	running, waiting := a.inUse()
	require.Zero(t, running+waiting)
}
