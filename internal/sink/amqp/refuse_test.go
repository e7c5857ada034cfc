package amqp

import (
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/sink/deliver"
)

// TestChannelClosedRefusal: the broker closing the channel over a message
// larger than its max_message_size is a refusal (the loop sets the entry
// aside); any other close is an outage (retried).
func TestChannelClosedRefusal(t *testing.T) {
	for _, tc := range []struct {
		err     *amqp.Error
		refused bool
	}{
		{&amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - message size 200000 is larger than configured max size 131072"}, true},
		{&amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg 'durable'"}, false},
		{&amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - no exchange 'xrd.detailed'"}, false},
		{&amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - broker forced connection closure"}, false},
		{nil, false},
	} {
		ch := make(chan *amqp.Error, 1)
		if tc.err != nil {
			ch <- tc.err
		}
		err := channelClosed(ch)
		if got := errors.Is(err, deliver.ErrRefused); got != tc.refused {
			t.Errorf("%v: refused = %v, want %v (%v)", tc.err, got, tc.refused, err)
		}
	}
}
