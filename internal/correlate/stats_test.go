package correlate

import (
	"reflect"
	"testing"
)

// TestStatsAdd checks that Add sums every field of Stats, so that a new
// counter or gauge cannot be left out of the lists it sums through.
func TestStatsAdd(t *testing.T) {
	var one Stats
	setAll(t, reflect.ValueOf(&one).Elem(), 1)
	var sum Stats
	sum.Add(&one)
	sum.Add(&one)
	var want Stats
	setAll(t, reflect.ValueOf(&want).Elem(), 2)
	if sum != want {
		t.Errorf("Add twice = %+v, want %+v", sum, want)
	}
}

// setAll sets every number in v to n.
func setAll(t *testing.T, v reflect.Value, n int64) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			setAll(t, v.Field(i), n)
		}
	case reflect.Array:
		for i := range v.Len() {
			setAll(t, v.Index(i), n)
		}
	case reflect.Int, reflect.Int64:
		v.SetInt(n)
	case reflect.Uint64:
		v.SetUint(uint64(n))
	default:
		t.Fatalf("Stats holds a %s: teach Add and this test about it", v.Type())
	}
}
