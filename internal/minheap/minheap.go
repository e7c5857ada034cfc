// Package minheap keeps a slice as a binary min-heap. It is container/heap
// for a concrete element type: nothing is boxed in an interface, so Push
// and Pop allocate only when the slice grows, and the slice stays the
// caller's to index, filter or sort (a sorted slice is a heap).
package minheap

// Ordered is an element of a heap: Less reports whether it comes before o.
type Ordered[T any] interface {
	Less(o *T) bool
}

// Push adds x to the heap h and returns the heap.
func Push[T any, P interface {
	*T
	Ordered[T]
}](h []T, x T) []T {
	h = append(h, x)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !P(&h[i]).Less(&h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

// Pop removes the least element of the non-empty heap h and returns the
// heap and that element.
func Pop[T any, P interface {
	*T
	Ordered[T]
}](h []T) ([]T, T) {
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && P(&h[l]).Less(&h[m]) {
			m = l
		}
		if r := l + 1; r < n && P(&h[r]).Less(&h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	return h, top
}
