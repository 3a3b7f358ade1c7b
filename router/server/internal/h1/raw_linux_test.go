//go:build linux

package h1

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawPair returns a Raw connection and its plain peer over loopback.
func rawPair(t *testing.T) (raw, peer net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := RawListener(ln).Accept()
		accepted <- c
	}()
	peer, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	raw = <-accepted
	require.NotNil(t, raw)
	_, ok := raw.(*rawConn)
	require.True(t, ok, "RawListener accepts raw connections")
	t.Cleanup(func() { raw.Close(); peer.Close() })
	return raw, peer
}

func TestRawReadsAndWritesLikeTCPConn(t *testing.T) {
	raw, peer := rawPair(t)
	// A write larger than the socket buffers: the raw write waits for writability and
	// finishes it.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(peer, int64(len(big))))
		got <- b
	}()
	n, err := raw.Write(big)
	require.NoError(t, err)
	assert.Equal(t, len(big), n)
	assert.True(t, bytes.Equal(big, <-got))

	// Reads return what arrived; a zero-length read returns at once.
	_, err = peer.Write([]byte("hello"))
	require.NoError(t, err)
	buf := make([]byte, 16)
	n, err = io.ReadAtLeast(raw, buf, 5)
	require.NoError(t, err)
	assert.Equal(t, "hello", string(buf[:n]))
	n, err = raw.Read(nil)
	assert.Equal(t, 0, n)
	assert.NoError(t, err)

	// The peer's close is io.EOF.
	require.NoError(t, peer.Close())
	n, err = raw.Read(buf)
	assert.Equal(t, 0, n)
	assert.Equal(t, io.EOF, err)
}

func TestRawDeadlinesAndCloseUnblock(t *testing.T) {
	raw, peer := rawPair(t)
	_ = peer
	buf := make([]byte, 8)
	require.NoError(t, raw.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
	_, err := raw.Read(buf)
	require.Error(t, err)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	var ne net.Error
	require.True(t, errors.As(err, &ne))
	assert.True(t, ne.Timeout())
	var oe *net.OpError
	require.True(t, errors.As(err, &oe))
	assert.Equal(t, "read", oe.Op)

	// Close unblocks a read waiting without a deadline.
	require.NoError(t, raw.SetReadDeadline(time.Time{}))
	done := make(chan error, 1)
	go func() {
		_, err := raw.Read(buf)
		done <- err
	}()
	// The read is blocked (nothing to read): close it from here.
	require.NoError(t, raw.Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not unblock the read")
	}
	_, err = raw.Write([]byte("x"))
	assert.ErrorIs(t, err, net.ErrClosed)
}

func TestRawConcurrentReadersAndWriters(t *testing.T) {
	raw, peer := rawPair(t)
	const n, size = 64, 1000
	go func() { _, _ = io.Copy(peer, peer) }() // echo
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := raw.Write(bytes.Repeat([]byte{byte('a' + i%26)}, size))
			assert.NoError(t, err)
		}()
	}
	// Two readers, each taking exactly half: every byte arrives once.
	var total int
	var mu sync.Mutex
	readers := sync.WaitGroup{}
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second))
			k, err := io.ReadFull(raw, make([]byte, n*size/2))
			assert.NoError(t, err)
			mu.Lock()
			total += k
			mu.Unlock()
		}()
	}
	wg.Wait()
	readers.Wait()
	assert.Equal(t, n*size, total)
}

func TestRawLeavesOtherConnsAlone(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	assert.Equal(t, a, Raw(a))
}
