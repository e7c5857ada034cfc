package source

import "testing"

// BenchmarkAppendShoveler measures envelope parsing with base64 decoding into
// a reused buffer.
func BenchmarkAppendShoveler(b *testing.B) {
	line := []byte(`{"data":"ZPIBDGg9+SQAgULaaHR0cHMvdW5rbm93bi4zMjQxODQ6MjU4MzA1OTk3MjQ1MTg0QFs6OjE5OC4xMjQuMjM5LjEwXQovbmNhci9yZGEvZDY1MTAwNy9iLmUxMy5CSElTVEM1Lm5lMTIwX3QxMi5jZXNtLWloZXNwLWhpcmVzMS4wLjMwLTE5MjAtMjAwNS4wMDMvYXRtL3Byb2MvdHNlcmllcy9ob3VyXzYvYi5lMTMuQkhJU1RDNS5uZTEyMF90MTIuY2VzbS1paGVzcC1oaXJlczEuMC4zMC0xOTIwLTIwMDUuMDAzLmNhbS5oMi5VNTAwLjE5NzYwMTAxMDAtMTk3NzAxMDEwMC5uYw==","remote":"2603:4000:c00:0:c:ffff:120c:1b1:51729","version":"Pelican-7.16.5"}`)
	buf := make([]byte, 0, 4096)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := AppendShoveler(buf[:0], line); err != nil {
			b.Fatal(err)
		}
	}
}
