package record

import (
	"math/rand/v2"
	"testing"
)

// benchLines returns realistic lines for provider: the loadgen/producer
// formats of gevent_corpus_test.go, with ordinary paths.
func benchLines(provider byte) [][]byte {
	r := rand.New(rand.NewPCG(3, 4))
	lines := make([][]byte, 64)
	for i := range lines {
		switch provider {
		case 'C':
			lines[i] = []byte(genCacheLine(r, corpusPaths[i%3]))
		case 'P':
			lines[i] = []byte(genTPCLine(r, corpusPaths[i%3]))
		default:
			lines[i] = []byte(sampleLine(r, provider))
		}
	}
	return lines
}

func benchTypeEvent(b *testing.B, provider string, lines [][]byte) {
	b.ReportAllocs()
	var e Event
	for i := 0; b.Loop(); i++ {
		e = Event{Provider: provider, Type: ProviderType(provider[0]), Raw: lines[i%len(lines)]}
		if !TypeEvent(&e) {
			b.Fatalf("invalid: %s", lines[i%len(lines)])
		}
	}
}

// BenchmarkTypeEvent types one event per iteration, per provider; "Crepair"
// is a C line whose lfn needs the unescaped-backslash repair.
func BenchmarkTypeEvent(b *testing.B) {
	for _, p := range []string{"C", "P", "R", "O", "H", "T"} {
		lines := benchLines(p[0])
		b.Run(p, func(b *testing.B) { benchTypeEvent(b, p, lines) })
	}
	r := rand.New(rand.NewPCG(5, 6))
	repair := [][]byte{[]byte(genCacheLine(r, `/data/we"ird\path\n.root`))}
	b.Run("Crepair", func(b *testing.B) { benchTypeEvent(b, "C", repair) })
}

// BenchmarkOldTypeEvent is BenchmarkTypeEvent for the encoding/json reference.
func BenchmarkOldTypeEvent(b *testing.B) {
	for _, p := range []string{"C", "P", "R", "O", "H", "T"} {
		lines := benchLines(p[0])
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, _, ok := oldParseEvent(p[0], lines[i%len(lines)]); !ok {
					b.Fatal("invalid")
				}
			}
		})
	}
}
