// Package signal wakes goroutines waiting for something to change: the
// store's log growing (the sinks), a reverse-DNS lookup ending (the
// pipeline's naming wait). A waiter takes the channel before it looks,
// then blocks on it: a change between the look and the wait is not missed.
package signal

import "sync"

// Broadcast wakes every waiter at each Notify. The zero value is ready.
type Broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// C returns a channel closed at the next Notify. Take it before checking
// for what you wait for, then wait on it.
func (b *Broadcast) C() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// Notify wakes the waiters of every channel C returned until now.
func (b *Broadcast) Notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// Closed reports, without blocking, whether ch is closed (or holds a
// value); a nil ch is never closed.
func Closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
