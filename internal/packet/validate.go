package packet

// Validate fully decodes datagram b according to its kind and reports the
// kind and the first defect found, without allocating. Binary packets are
// decoded with their Decode function and then walked completely: a map
// record's payload is parsed by type ('=' ServerIdent, 'u' Login, 'T'
// Token, 'U' UEAC, 'p' Purge, 'x' FRMXfer), every f-stream, t-stream and
// r-stream record is decoded field by field, and every g-stream line is
// split out. Text g-streams are decoded likewise. XML and JSON summaries are
// recognised and returned with a nil error, since this package does not
// decode them. Anything else is ErrUnknownCode (or ErrShort when empty).
//
// The correlator does not call it (it decodes what it applies, and counts
// what it rejects, as it goes); tests and the fuzz target use it to reach
// every decoding path, and loadgen's tests to check what it emits.
func Validate(b []byte) (Kind, error) {
	k := Classify(b)
	switch k {
	case KindMap:
		return k, validateMap(b)
	case KindFStream:
		f, err := DecodeFStream(b)
		if err != nil {
			return k, err
		}
		n := 0
		it := f.Records()
		for it.Next() {
			r := it.Rec()
			switch r.Type {
			case RecOpen:
				_ = r.Open()
			case RecClose:
				_ = r.Close()
			case RecXfr:
				_ = r.Xfr()
			}
			n++
		}
		if n != int(f.NRecs) { // cannot happen: DecodeFStream checked it
			return k, ErrRecordCount
		}
		return k, nil
	case KindTrace:
		t, err := DecodeTrace(b)
		if err != nil {
			return k, err
		}
		for i := 0; i < t.Len(); i++ {
			e := t.Entry(i)
			switch e.Kind() {
			case TraceIO:
				_, _ = e.IO()
			case TraceOpen:
				_ = e.OpenSize()
			case TraceReadv, TraceReadu:
				_, _, _ = e.Readv()
			case TraceAppID:
				_ = e.AppID()
			case TraceClose:
				_, _ = e.CloseTotals()
			case TraceDisc:
				_, _ = e.Disc()
			case TraceWindow:
				_, _, _ = e.Window()
			}
		}
		return k, nil
	case KindRedir:
		r, err := DecodeRedir(b)
		if err != nil {
			return k, err
		}
		it := r.Entries()
		for it.Next() {
			_ = it.Entry()
		}
		return k, nil
	case KindGStream, KindTextGStream, KindCGIGStream:
		it, err := gstreamLines(k, b)
		if err != nil {
			return k, err
		}
		for it.Next() {
			_ = it.Line()
		}
		return k, nil
	case KindXMLSummary, KindJSONSummary:
		return k, nil
	}
	if len(b) == 0 {
		return k, ErrShort
	}
	return k, ErrUnknownCode
}

// gstreamLines decodes a binary (k KindGStream) or text g-stream and
// returns its lines.
func gstreamLines(k Kind, b []byte) (LineIter, error) {
	if k == KindGStream {
		g, err := DecodeGStream(b)
		return g.Lines(), err
	}
	t, err := DecodeTextGStream(b)
	return t.Lines(), err
}

// validateMap decodes a map record and parses its payload by type.
func validateMap(b []byte) error {
	m, err := DecodeMap(b)
	if err != nil {
		return err
	}
	uid, payload := m.Split()
	_ = ParseUserID(uid, m.Code != CodePurge && m.Code != CodeXfer)
	switch m.Code {
	case CodeIdent:
		_, err = ParseServerIdent(payload)
	case CodeUser:
		_ = ParseLogin(payload)
	case CodeToken:
		_, err = ParseToken(payload)
	case CodeUEAC:
		_, err = ParseUEAC(payload)
	case CodePurge:
		_, err = ParsePurge(payload)
	case CodeXfer:
		_, err = ParseFRMXfer(payload)
	}
	return err
}
