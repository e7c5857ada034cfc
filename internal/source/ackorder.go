package source

// AckOrder is the delivery order of a broker session's batches, for an
// acknowledgement that covers a message and every one before it (AMQP's
// multiple ack, STOMP's client ack mode). The pipeline acknowledges the
// batches in any order; a batch is acknowledged to the broker only
// together with every earlier one, so that an acknowledgement never covers
// a batch that is not yet durable. T is what acknowledges a batch to the
// broker: its last message, or that message's delivery tag.
//
// The zero AckOrder is empty and ready. It is not safe for concurrent use:
// its owner serializes the calls.
type AckOrder[T any] struct {
	pending []*Pending[T] // handed over, in delivery order
}

// Pending is a batch's place in an AckOrder.
type Pending[T any] struct {
	last T
	done bool
}

// Add places a batch, whose last message is last, at the end of the order.
func (o *AckOrder[T]) Add(last T) *Pending[T] {
	p := &Pending[T]{last: last}
	o.pending = append(o.pending, p)
	return p
}

// Forget removes p, the batch added last, which was not handed over after
// all (its messages are redelivered). A p that is not the last is left in
// place.
func (o *AckOrder[T]) Forget(p *Pending[T]) {
	if n := len(o.pending); n > 0 && o.pending[n-1] == p {
		o.pending = o.pending[:n-1]
	}
}

// Done marks p acknowledged by the pipeline. When that completes a run of
// acknowledged batches at the head of the order, Done takes the run out
// and returns its last batch's last message, which acknowledges them all
// to the broker (ok). Otherwise an earlier batch is still in flight (p is
// acknowledged with it later), or p was marked before: ok is false.
func (o *AckOrder[T]) Done(p *Pending[T]) (last T, ok bool) {
	if p.done {
		return last, false
	}
	p.done = true
	n := 0
	for n < len(o.pending) && o.pending[n].done {
		n++
	}
	if n == 0 {
		return last, false
	}
	last = o.pending[n-1].last
	clear(o.pending[:n])
	o.pending = o.pending[n:]
	return last, true
}

// Len returns the number of batches in the order: handed over and not yet
// acknowledged to the broker.
func (o *AckOrder[T]) Len() int { return len(o.pending) }

// Reset empties the order (the session ended).
func (o *AckOrder[T]) Reset() {
	clear(o.pending)
	o.pending = nil
}
