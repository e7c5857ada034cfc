package record

import (
	"bytes"
	"encoding/json"
	"testing"
)

// checkSameAsOld fails t when ParseEvent and the encoding/json reference
// (oldParseEvent) disagree on line.
func checkSameAsOld(t *testing.T, provider byte, line []byte) {
	t.Helper()
	orig := bytes.Clone(line)
	wantTyp, wantData, wantValid := oldParseEvent(provider, bytes.Clone(line))
	typ, data, valid := ParseEvent(provider, line)
	if !bytes.Equal(line, orig) {
		t.Fatalf("ParseEvent(%q, %q) modified its input", provider, orig)
	}
	if typ != wantTyp || valid != wantValid || !bytes.Equal(data, wantData) {
		t.Fatalf("ParseEvent(%q, %q)\n got: %q %v %s\nwant: %q %v %s",
			provider, line, typ, valid, data, wantTyp, wantValid, wantData)
	}
	if !json.Valid(data) {
		t.Fatalf("ParseEvent(%q, %q): data is not valid JSON: %s", provider, line, data)
	}
}

// TestParseEventMatchesEncodingJSON runs well-formed and mutated lines of
// every provider through ParseEvent and the encoding/json reference.
func TestParseEventMatchesEncodingJSON(t *testing.T) {
	n := 60000
	if testing.Short() {
		n = 6000
	}
	valid := map[byte][2]int{}
	for i, in := range diffCorpus(n) {
		p := in.provider
		if i%17 == 0 { // a line under another provider's name
			p = corpusProviders[(i/17)%len(corpusProviders)]
		}
		checkSameAsOld(t, p, []byte(in.line))
		_, _, ok := oldParseEvent(p, []byte(in.line))
		c := valid[p]
		if ok {
			c[0]++
		} else {
			c[1]++
		}
		valid[p] = c
	}
	for p, c := range valid {
		t.Logf("provider %c: %d valid, %d invalid", p, c[0], c[1])
	}
}

// fuzzSeeds are the FuzzParseEvent seeds beside those in testdata/fuzz.
func fuzzSeeds() []corpusInput {
	in := diffCorpus(64)
	for _, l := range []string{pfcLine, tpcLine, "", "null", "{}", "[]", `"s"`, "1", `{"a":1}{}`, `{"a":1} x`} {
		for _, p := range []byte(corpusProviders) {
			in = append(in, corpusInput{p, l})
		}
	}
	return in
}

// FuzzParseEvent compares ParseEvent with the encoding/json reference.
func FuzzParseEvent(f *testing.F) {
	for _, in := range fuzzSeeds() {
		f.Add(in.provider, []byte(in.line))
	}
	f.Fuzz(func(t *testing.T, provider byte, line []byte) {
		checkSameAsOld(t, provider, line)
	})
}
