package signal

import (
	"testing"
	"time"
)

// TestBroadcast: every channel taken before a Notify is closed by it, a
// channel taken after is not, and a Notify with no waiter costs nothing.
func TestBroadcast(t *testing.T) {
	var b Broadcast
	b.Notify() // no waiter
	a, c := b.C(), b.C()
	select {
	case <-a:
		t.Fatal("closed before Notify")
	default:
	}
	b.Notify()
	for _, ch := range []<-chan struct{}{a, c} {
		select {
		case <-ch:
		case <-time.After(time.Second):
			t.Fatal("a waiter was not woken")
		}
	}
	select {
	case <-b.C():
		t.Fatal("a channel taken after Notify is closed")
	default:
	}
}
