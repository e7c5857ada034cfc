package record

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"
)

// extremeRecord has negative and extreme values in every numeric field,
// times before 1970 and outside the int64-nanosecond range, and strings
// that are not UTF-8.
func extremeRecord() *Record {
	return &Record{
		RecordID:           "\x00\xff\xfe",
		Reason:             Reason("not a known reason \xc3"),
		Start:              time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), // not zero, and wide
		End:                time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		Received:           time.Unix(-1, 5).UTC(),
		ServerIP:           "\xed\xa0\x80",
		ServerID:           math.MaxUint64,
		ServerStod:         math.MinInt64,
		UserDictID:         math.MaxUint32,
		Experiment:         math.MinInt32,
		Activity:           math.MaxInt32,
		FileID:             math.MaxUint32,
		Path:               "/a\x00b/\xff",
		FileSize:           -1,
		ReadBytes:          math.MaxInt64,
		ReadvBytes:         math.MinInt64,
		WriteBytes:         -12345,
		ReadOps:            -1,
		ReadvOps:           math.MinInt32,
		WriteOps:           math.MaxInt32,
		ReadvSegs:          -599,
		ReadvSegsMin:       math.MinInt16,
		ReadvSegsMax:       math.MaxInt16,
		ReadMin:            -4096,
		ReadMax:            math.MaxInt32,
		ReadvMin:           math.MinInt32,
		ReadvMax:           -1,
		WriteMin:           -2,
		WriteMax:           -3,
		ReadSqSum:          -7.5e12,
		ReadvSqSum:         math.SmallestNonzeroFloat64,
		ReadvSegSqSum:      math.MaxFloat64,
		WriteSqSum:         math.Inf(-1),
		RedirectHops:       math.MinInt32,
		RedirectDelayMS:    math.MaxInt64,
		RedirectDelayMaxMS: math.MinInt64,
		HasIO:              true,
		IO: &IOProfile{
			Reads: math.MaxInt64, Readvs: math.MinInt64, Writes: -1, SequentialReads: 1 << 62,
			ReadSizes:   Log2Hist{31: math.MaxUint32},
			ReadvCounts: Log2Hist{0: 1, 31: 2},
		},
	}
}

func binaryTestRecords() map[string]*Record {
	oneTimeZero := fullRecord()
	oneTimeZero.End = time.Time{}
	return map[string]*Record{
		"full":          fullRecord(),
		"golden":        goldenRecord(),
		"minimal":       minimalRecord(),
		"zero":          {},
		"extreme":       extremeRecord(),
		"one-time-zero": oneTimeZero,
	}
}

func TestBinaryRoundTrip(t *testing.T) {
	for name, r := range binaryTestRecords() {
		t.Run(name, func(t *testing.T) {
			b := AppendBinary(nil, r)
			var got Record
			if err := DecodeBinary(b, &got); err != nil {
				t.Fatalf("DecodeBinary: %v", err)
			}
			if !reflect.DeepEqual(&got, r) {
				t.Fatalf("round trip differs\n got: %+v\nwant: %+v", got, *r)
			}
			// Decoding must not alias b: scribble over it and compare again.
			for i := range b {
				b[i] = 0xAA
			}
			if !reflect.DeepEqual(&got, r) {
				t.Fatalf("decoded record changed when its input buffer was overwritten")
			}
			// AppendBinary appends, and decoding replaces every field.
			b2 := AppendBinary([]byte("xyz"), r)
			if string(b2[:3]) != "xyz" {
				t.Fatal("AppendBinary did not keep dst")
			}
			dirty := *fullRecord()
			dirty.Path, dirty.Reason = "stale", Timeout
			if err := DecodeBinary(b2[3:], &dirty); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&dirty, r) {
				t.Fatalf("decoding into a used record kept old values\n got: %+v\nwant: %+v", dirty, *r)
			}
		})
	}
}

func TestBinaryFloatsBitExact(t *testing.T) {
	r := &Record{ReadSqSum: math.NaN(), ReadvSqSum: math.Copysign(0, -1), ReadvSegSqSum: math.Inf(1), WriteSqSum: math.Float64frombits(0x7ff8000000000001)}
	var got Record
	if err := DecodeBinary(AppendBinary(nil, r), &got); err != nil {
		t.Fatal(err)
	}
	for i, p := range [][2]float64{{got.ReadSqSum, r.ReadSqSum}, {got.ReadvSqSum, r.ReadvSqSum}, {got.ReadvSegSqSum, r.ReadvSegSqSum}, {got.WriteSqSum, r.WriteSqSum}} {
		if math.Float64bits(p[0]) != math.Float64bits(p[1]) {
			t.Errorf("float %d: got bits %x, want %x", i, math.Float64bits(p[0]), math.Float64bits(p[1]))
		}
	}
}

func TestBinaryTimesInUTC(t *testing.T) {
	r := minimalRecord()
	r.Start = r.Start.In(time.FixedZone("X", 3600))
	r.Received = time.Now() // with a monotonic clock reading, in Local
	var got Record
	if err := DecodeBinary(AppendBinary(nil, r), &got); err != nil {
		t.Fatal(err)
	}
	if !got.Start.Equal(r.Start) || got.Start.Location() != time.UTC {
		t.Errorf("start = %v, want %v in UTC", got.Start, r.Start)
	}
	if !got.Received.Equal(r.Received) || got.Received != r.Received.Round(0).UTC() {
		t.Errorf("received = %v, want %v", got.Received, r.Received.Round(0).UTC())
	}
}

func TestBinaryIsSmallerThanJSON(t *testing.T) {
	r := goldenRecord()
	bin, js := AppendBinary(nil, r), AppendJSON(nil, r)
	if len(bin) >= len(js)*2/3 {
		t.Errorf("binary is %d bytes, JSON %d: want well under 2/3", len(bin), len(js))
	}
	if bin[0] == '{' || AppendEventBinary(nil, &Event{})[0] == '{' {
		t.Error("binary form starts with '{', like JSON")
	}
}

func binaryTestEvents(t testing.TB) map[string]*Event {
	raw := testEvent(t, 'C', pfcLine)
	raw.Type, raw.Data, raw.Valid = EventCacheFileClose, nil, false
	raw.Raw = []byte(pfcLine)
	emptyRaw := &Event{Provider: "X", Raw: []byte{}}
	emptyData := &Event{Data: json.RawMessage{}, Time: time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC)}
	return map[string]*Event{
		"pfc":        testEvent(t, 'C', pfcLine),
		"tpc":        testEvent(t, 'P', tpcLine),
		"invalid":    testEvent(t, 'C', "{\"event\":\"file_close\",\"lfn\":\"/a\xff<b>\" broken"),
		"raw":        raw,
		"empty-raw":  emptyRaw,
		"empty-data": emptyData,
		"zero":       {},
		"negative":   {EventID: "\xff", ServerStod: -5, ServerID: math.MaxUint64, Time: time.Unix(-100, 3).UTC(), Valid: true},
	}
}

func TestEventBinaryRoundTrip(t *testing.T) {
	for name, e := range binaryTestEvents(t) {
		t.Run(name, func(t *testing.T) {
			b := AppendEventBinary(nil, e)
			var got Event
			if err := DecodeEventBinary(b, &got); err != nil {
				t.Fatalf("DecodeEventBinary: %v", err)
			}
			if !reflect.DeepEqual(&got, e) {
				t.Fatalf("round trip differs\n got: %+v\nwant: %+v", got, *e)
			}
			for i := range b {
				b[i] = 0xAA
			}
			if !reflect.DeepEqual(&got, e) {
				t.Fatalf("decoded event changed when its input buffer was overwritten")
			}
			if len(got.Data) > 0 && cap(got.Data) != len(got.Data) {
				t.Errorf("Data has spare capacity %d", cap(got.Data)-len(got.Data))
			}
		})
	}
}

func TestDecodeBinaryErrors(t *testing.T) {
	full := AppendBinary(nil, fullRecord())
	ev := AppendEventBinary(nil, testEvent(t, 'P', tpcLine))

	// Every strict prefix is an error, never a panic, and leaves r as is.
	for _, c := range []struct {
		name string
		b    []byte
		dec  func([]byte) error
	}{
		{"record", full, func(b []byte) error {
			r := minimalRecord()
			err := DecodeBinary(b, r)
			return unchanged(err, r, minimalRecord())
		}},
		{"event", ev, func(b []byte) error {
			var e Event
			err := DecodeEventBinary(b, &e)
			return unchanged(err, &e, &Event{})
		}},
	} {
		for n := range len(c.b) {
			err := c.dec(c.b[:n])
			if !errors.Is(err, ErrBinaryCorrupt) {
				t.Fatalf("%s truncated to %d bytes: err = %v, want ErrBinaryCorrupt", c.name, n, err)
			}
		}
		if err := c.dec(append(c.b[:len(c.b):len(c.b)], 0)); !errors.Is(err, ErrBinaryCorrupt) {
			t.Errorf("%s with a trailing byte: err = %v, want ErrBinaryCorrupt", c.name, err)
		}
	}

	var r Record
	var e Event
	for name, c := range map[string]struct {
		err  error
		want error
	}{
		"record version 2":   {DecodeBinary(append([]byte{2}, full[1:]...), &r), ErrBinaryVersion},
		"record from JSON":   {DecodeBinary(AppendJSON(nil, fullRecord()), &r), ErrBinaryVersion},
		"record from event":  {DecodeBinary(ev, &r), ErrBinaryVersion},
		"event from record":  {DecodeEventBinary(full, &e), ErrBinaryVersion},
		"event version 0x42": {DecodeEventBinary(append([]byte{0x42}, ev[1:]...), &e), ErrBinaryVersion},
		// One field, flags 0, a RecordID of 5 bytes but a 2-byte string section.
		"string past section": {DecodeBinary([]byte{1, 2, 2, 'a', 'b', 0, 5}, &r), ErrBinaryCorrupt},
		// String section of 9 bytes in a 4-byte record.
		"section past end": {DecodeBinary([]byte{1, 0, 9, 'a'}, &r), ErrBinaryCorrupt},
		// String section bytes no field uses.
		"unused strings": {DecodeBinary([]byte{1, 1, 1, 'a', 0}, &r), ErrBinaryCorrupt},
		// 36 fields: UserDictID (field 34) of 2^32 does not fit a uint32.
		"uint32 range": {DecodeBinary(fieldsUpTo(t, 33, 0x80, 0x80, 0x80, 0x80, 0x10), &r), ErrBinaryCorrupt},
		// Varint of 11 bytes.
		"varint overflow": {DecodeBinary([]byte{1, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, &r), ErrBinaryCorrupt},
		"empty":           {DecodeBinary(nil, &r), ErrBinaryCorrupt},
		// Data bit clear but a Data length.
		"event data not present": {DecodeEventBinary([]byte{0x41, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'x'}, &e), ErrBinaryCorrupt},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: err = %v, want %v", name, c.err, c.want)
		}
	}
}

// unchanged returns err, or an error if it is nil or if got is no longer
// want.
func unchanged(err error, got, want any) error {
	if err == nil {
		return errors.New("no error")
	}
	if !reflect.DeepEqual(got, want) {
		return errors.New("the destination changed on error")
	}
	return err
}

// fieldsUpTo returns a record with n+1 fields: the first n zero (flags
// marking zero times, empty strings, zero numbers) and then the raw bytes of
// field n+1.
func fieldsUpTo(t *testing.T, n int, last ...byte) []byte {
	t.Helper()
	if n < 31 {
		t.Fatal("fieldsUpTo needs n >= 31")
	}
	b := []byte{binaryRecordV1, byte(n + 1), 0}
	b = binary.AppendUvarint(b, rfStartZero|rfEndZero|rfReceivedZero) // zero times take no bytes
	b = append(b, make([]byte, 27+n-31)...)                           // 27 empty strings, n-31 zero numbers
	return append(b, last...)
}

func TestDecodeBinaryOlderWriter(t *testing.T) {
	// Fields missing from older data decode as zero.
	for _, c := range []struct {
		b    []byte
		want Record
	}{
		{[]byte{binaryRecordV1, 0, 0}, Record{}},
		{[]byte{binaryRecordV1, 1, 0, rfIPv6 | rfForced}, Record{IPv6: true, Forced: true}},
		{[]byte{binaryRecordV1, 3, 4, 'a', 'b', 'c', 'x', rfHasOps, 3, 1}, Record{RecordID: "abc", Reason: "x", HasOps: true}},
		{fieldsUpTo(t, 32, 0x03), Record{ServerStod: -2}},
	} {
		var got Record
		if err := DecodeBinary(c.b, &got); err != nil {
			t.Errorf("% x: %v", c.b, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("% x: got %+v, want %+v", c.b, got, c.want)
		}
	}
}

// withExtraFields rewrites a version-1 encoding as a newer writer would
// write it: extra more fields, whose bytes are fields, and extra string
// bytes at the end of the string section.
func withExtraFields(t *testing.T, b []byte, extra int, strs string, fields []byte) []byte {
	t.Helper()
	n, sl := uint64(b[1]), 0
	slen, k := binary.Uvarint(b[2:])
	if n >= 0x80 || k <= 0 {
		t.Fatal("unexpected header")
	}
	sl = 2 + k
	out := []byte{b[0]}
	out = binary.AppendUvarint(out, n+uint64(extra))
	out = binary.AppendUvarint(out, slen+uint64(len(strs)))
	out = append(out, b[sl:sl+int(slen)]...)
	out = append(out, strs...)
	out = append(out, b[sl+int(slen):]...)
	return append(out, fields...)
}

func TestDecodeBinaryNewerWriter(t *testing.T) {
	r := fullRecord()
	// Two new fields: a string "new" and an 8-byte value.
	b := withExtraFields(t, AppendBinary(nil, r), 2, "new", []byte{3, 1, 2, 3, 4, 5, 6, 7, 8})
	var got Record
	if err := DecodeBinary(b, &got); err != nil {
		t.Fatalf("newer record: %v", err)
	}
	if !reflect.DeepEqual(&got, r) {
		t.Errorf("newer record decoded as %+v", got)
	}

	e := testEvent(t, 'C', pfcLine)
	b = withExtraFields(t, AppendEventBinary(nil, e), 1, "", []byte{0x80, 0x01})
	var gotE Event
	if err := DecodeEventBinary(b, &gotE); err != nil {
		t.Fatalf("newer event: %v", err)
	}
	if !reflect.DeepEqual(&gotE, e) {
		t.Errorf("newer event decoded as %+v", gotE)
	}
}

func TestBinaryAppendDoesNotAllocate(t *testing.T) {
	r := fullRecord()
	e := testEvent(t, 'P', tpcLine)
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { buf = AppendBinary(buf[:0], r) }); n != 0 {
		t.Errorf("AppendBinary: %v allocs, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { buf = AppendEventBinary(buf[:0], e) }); n != 0 {
		t.Errorf("AppendEventBinary: %v allocs, want 0", n)
	}
	b := AppendBinary(nil, r)
	var got Record
	if n := testing.AllocsPerRun(100, func() { _ = DecodeBinary(b, &got) }); n != 2 {
		t.Errorf("DecodeBinary: %v allocs, want 2 (the strings and the I/O profile)", n)
	}
	untraced := *r
	untraced.HasIO, untraced.IO = false, nil
	b = AppendBinary(nil, &untraced)
	if n := testing.AllocsPerRun(100, func() { _ = DecodeBinary(b, &got) }); n != 1 {
		t.Errorf("DecodeBinary without an I/O profile: %v allocs, want 1 (the strings)", n)
	}
}

// FuzzDecodeBinary feeds arbitrary bytes to both decoders: they must not
// panic, and whatever they accept must survive an encode/decode round trip
// bit for bit.
func FuzzDecodeBinary(f *testing.F) {
	for _, r := range binaryTestRecords() {
		b := AppendBinary(nil, r)
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	for _, e := range binaryTestEvents(f) {
		f.Add(AppendEventBinary(nil, e))
	}
	f.Add([]byte{binaryRecordV1, 0, 0})
	f.Add([]byte{binaryRecordV1, 3, 4, 'a', 'b', 'c', 'x', rfHasOps, 3, 1})
	f.Add([]byte{binaryRecordV1, 60, 0, 0})
	f.Add([]byte{binaryRecordV1, 29, 0, 0x80, rfStartWide >> 7, 0x80})
	f.Add([]byte(`{"record_id":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		var r Record
		if err := DecodeBinary(b, &r); err == nil {
			enc := AppendBinary(nil, &r)
			var r2 Record
			if err := DecodeBinary(enc, &r2); err != nil {
				t.Fatalf("re-decoding a decoded record: %v", err)
			}
			if enc2 := AppendBinary(nil, &r2); !bytes.Equal(enc, enc2) {
				t.Fatalf("record round trip not stable:\n% x\n% x", enc, enc2)
			}
		}
		var e Event
		if err := DecodeEventBinary(b, &e); err == nil {
			enc := AppendEventBinary(nil, &e)
			var e2 Event
			if err := DecodeEventBinary(enc, &e2); err != nil {
				t.Fatalf("re-decoding a decoded event: %v", err)
			}
			if !reflect.DeepEqual(&e, &e2) {
				t.Fatalf("event round trip differs: %+v vs %+v", e, e2)
			}
		}
		if !bytes.Equal(b, in) {
			t.Fatal("a decoder wrote to its input")
		}
	})
}

// TestDecodeStored: blobs written by earlier versions (JSON) and by this one
// (binary) both decode to the same record and event.
func TestDecodeStored(t *testing.T) {
	r := Record{RecordID: "0123456789abcdef0123456789abcdef", ServerIP: "192.0.2.1", Path: "/store/x",
		ReadBytes: 42, Start: time.Unix(1700000000, 0).UTC(), End: time.Unix(1700000100, 0).UTC(), Reason: Timeout}
	for name, blob := range map[string][]byte{"json": AppendJSON(nil, &r), "binary": AppendBinary(nil, &r)} {
		var got Record
		if err := DecodeStored(blob, &got); err != nil || !reflect.DeepEqual(got, r) {
			t.Errorf("%s: %v\n got %+v\nwant %+v", name, err, got, r)
		}
	}
	e := Event{EventID: "ev", Type: EventTPC, Provider: "P", ServerIP: "192.0.2.1", Valid: true,
		Time: time.Unix(1700000000, 0).UTC(), Data: []byte(`{"TPC":"xroot"}`)}
	js, _ := json.Marshal(&e)
	for name, blob := range map[string][]byte{"json": js, "binary": AppendEventBinary(nil, &e)} {
		var got Event
		if err := DecodeStoredEvent(blob, &got); err != nil || got.EventID != "ev" || string(got.Data) != `{"TPC":"xroot"}` {
			t.Errorf("%s: %v %+v", name, err, got)
		}
	}
}
