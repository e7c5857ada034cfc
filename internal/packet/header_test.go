package packet

import "testing"

func TestClassify(t *testing.T) {
	tests := []struct {
		in     string
		want   Kind
		binary bool
	}{
		{"", KindUnknown, false},
		{"=", KindMap, true}, {"d", KindMap, true}, {"i", KindMap, true}, {"p", KindMap, true},
		{"T", KindMap, true}, {"u", KindMap, true}, {"U", KindMap, true}, {"x", KindMap, true},
		{"f", KindFStream, true}, {"t", KindTrace, true}, {"r", KindRedir, true}, {"g", KindGStream, true},
		{"<statistics/>", KindXMLSummary, false},
		{`{"statistics":{}}`, KindJSONSummary, false},
		{`{"code":"g"`, KindTextGStream, false},
		{"code=g&pseq=1", KindCGIGStream, false},
		{"cod", KindUnknown, false},
		{"m", KindUnknown, false}, // internal only, never on the wire
		{"s", KindUnknown, false},
	}
	for _, tc := range tests {
		k := Classify([]byte(tc.in))
		if k != tc.want || k.Binary() != tc.binary {
			t.Errorf("Classify(%q) = %v (binary %v), want %v", tc.in, k, k.Binary(), tc.want)
		}
	}
	if KindCGIGStream.String() != "cgi_gstream" || Kind(200).String() != "unknown" {
		t.Error("kind labels")
	}
}

func TestParseHeader(t *testing.T) {
	h, err := ParseHeader(hexb(t, "75 ff 0008 fffffffe"))
	if err != nil || h != (Header{Code: 'u', Pseq: 255, Plen: 8, Stod: 0xfffffffe}) {
		t.Errorf("ParseHeader = %+v, %v", h, err)
	}
	// Past 2038 stod is still read as unsigned.
	if h.Stod <= 1<<31 {
		t.Error("stod read as signed")
	}
}
