package hashmix

import "testing"

func TestFmix64(t *testing.T) {
	for _, c := range []struct{ in, want uint64 }{
		{0, 0},
		{1, 0xb456bcfc34c2cb2c},
		{0x0123456789abcdef, 0x87cbfbfe89022cea},
	} {
		if got := Fmix64(c.in); got != c.want {
			t.Errorf("Fmix64(%#x) = %#x, want %#x", c.in, got, c.want)
		}
	}
}
