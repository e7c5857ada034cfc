package source

import "testing"

// TestAckOrder: batches acknowledged out of order are acknowledged to the
// broker in order, by the last message of the longest run of acknowledged
// batches at the head; a batch marked twice changes nothing, and a batch
// forgotten leaves the order.
func TestAckOrder(t *testing.T) {
	var o AckOrder[int]
	p10, p20, p30 := o.Add(10), o.Add(20), o.Add(30)
	if last, ok := o.Done(p20); ok {
		t.Fatalf("acknowledged %d before the first batch was done", last)
	}
	if last, ok := o.Done(p10); !ok || last != 20 {
		t.Fatalf("Done = %d, %v; want 20, true", last, ok)
	}
	if last, ok := o.Done(p10); ok || o.Len() != 1 {
		t.Fatalf("marked twice: Done = %d, %v; Len %d, want 1", last, ok, o.Len())
	}
	p40 := o.Add(40)
	o.Forget(p30) // not the last: stays
	o.Forget(p40)
	if o.Len() != 1 {
		t.Fatalf("Len %d after forgetting the last batch, want 1", o.Len())
	}
	if last, ok := o.Done(p30); !ok || last != 30 || o.Len() != 0 {
		t.Fatalf("Done = %d, %v, Len %d; want 30, true, 0", last, ok, o.Len())
	}
	o.Add(50)
	o.Reset()
	if o.Len() != 0 {
		t.Fatalf("Len %d after Reset", o.Len())
	}
}
