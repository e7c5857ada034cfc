package rollup

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"unsafe"

	"github.com/klauspost/compress/s2"

	"github.com/xrdmon/xrdmon/internal/codec"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// Part encoding (version 4), in sections by spec (the builder stores a
// part per spec, one section each, so that a query reads only its spec's
// series; a minute as a flush writes it is one part of every spec's
// section, store.AllSpecs: see encodeAll):
//
//	byte    0
//	byte    version (4)
//	uvarint number of sections, then per section, in spec order:
//	uvarint spec length, spec, uvarint length, S2-compressed series:
//	  uvarint number of series, then per series in key order:
//	  uvarint key length, key, uvarint Agg length, Agg (appendAgg)
//
// A sparse minute (a few entries: see minute) is stored as its entries
// instead, a part of store.AllSpecs that a read sums into the series of
// the specs it asks for (appendEntries, rawPart); an hour's kept entries
// are stored the same way:
//
//	byte    0
//	byte    5 (entries)
//	uvarint length, S2-compressed:
//	  uvarint number of specs, each uvarint length, spec: what the entries are summed by
//	  uvarint number of dimensions, each uvarint length, name: what their values are of
//	  uvarint number of entries, then per entry:
//	    per dimension: uvarint length, value
//	    uvarint read, readv, write (bytes)
//	    byte    0 (a progress snapshot: the bytes only) or 1 (a record), then for a record:
//	    uvarint reason (0 complete, else 1 + its index in record.Reasons)
//	    4 bytes user hash (little-endian), uvarint duration (ms),
//	    varint duration bucket, varint size bucket (histIndex)
//
// Earlier versions (one S2 block of every spec; 8-byte user hashes) were
// never released and are not read.
const (
	partVersion = 4
	rawVersion  = 5
)

// encodeParts returns the stored parts of m: one per spec, each in the
// format above with one section.
func encodeParts(m map[string]*Agg) []specPart {
	var e partEncoder
	return e.encode(nil, m)
}

// partEncoder encodes parts with buffers kept from one bucket to the next,
// into an arena of output bytes: a flush encodes thousands of parts.
type partEncoder struct {
	series   []keyed
	body, ab []byte
	secs     []byte // encodeAll's sections
	out      []byte // the arena: each part's data is a full slice of it
}

// keyed is a series with its key.
type keyed struct {
	key string
	agg *Agg
}

// encode appends the parts of m to dst, one per spec (see encodeParts).
func (e *partEncoder) encode(dst []specPart, m map[string]*Agg) []specPart {
	e.sections(m, func(spec string, z []byte) {
		b := e.room(3 + binary.MaxVarintLen64 + len(spec) + binary.MaxVarintLen64 + len(z))
		n := len(b)
		b = append(b, 0, partVersion, 1)
		b = codec.AppendString(b, spec)
		b = codec.AppendBytes(b, z)
		e.out = b
		dst = append(dst, specPart{spec, b[n:len(b):len(b)]})
	})
	return dst
}

// encodeAll returns the part of m that holds every spec's series, a
// section each, as a row of store.AllSpecs: a minute of a stream whose
// time runs fast (a replay, a catch-up, xrdmon bench) holds a few
// records, and a row per spec would cost the store ten rows, their
// index entries and their deletion by retention for each.
func (e *partEncoder) encodeAll(m map[string]*Agg) specPart {
	e.secs = e.secs[:0]
	n := 0
	e.sections(m, func(spec string, z []byte) {
		e.secs = codec.AppendString(e.secs, spec)
		e.secs = codec.AppendBytes(e.secs, z)
		n++
	})
	b := e.room(2 + binary.MaxVarintLen64 + len(e.secs))
	k := len(b)
	b = append(b, 0, partVersion)
	b = binary.AppendUvarint(b, uint64(n))
	b = append(b, e.secs...)
	e.out = b
	return specPart{store.AllSpecs, b[k:len(b):len(b)]}
}

// appendEntries appends entries raw encoded as a part of entries holds
// them (see the format above).
func appendEntries(dst []byte, raw []rawEntry) []byte {
	for i := range raw {
		r := &raw[i]
		for _, v := range r.vals {
			dst = codec.AppendString(dst, v)
		}
		dst = appendDelta(dst, &r.d)
	}
	return dst
}

// rawPart returns the part of n entries, encoded in ents (appendEntries),
// summed by specs, whose values are of dims, as a row of store.AllSpecs.
func (e *partEncoder) rawPart(ents []byte, n int, specs []Spec, dims []record.Dim) specPart {
	body := binary.AppendUvarint(e.body[:0], uint64(len(specs)))
	for _, s := range specs {
		body = codec.AppendString(body, string(s))
	}
	body = binary.AppendUvarint(body, uint64(len(dims)))
	for _, d := range dims {
		body = codec.AppendString(body, string(d))
	}
	body = binary.AppendUvarint(body, uint64(n))
	body = append(body, ents...)
	e.body = body
	e.ab = s2.Encode(e.ab[:cap(e.ab)], body)
	b := e.room(2 + binary.MaxVarintLen64 + len(e.ab))
	k := len(b)
	b = append(b, 0, rawVersion)
	b = codec.AppendBytes(b, e.ab)
	e.out = b
	return specPart{store.AllSpecs, b[k:len(b):len(b)]}
}

// appendDelta appends d as an entry of a sparse minute's part.
func appendDelta(b []byte, d *delta) []byte {
	b = binary.AppendUvarint(b, uint64(max(d.read, 0)))
	b = binary.AppendUvarint(b, uint64(max(d.readv, 0)))
	b = binary.AppendUvarint(b, uint64(max(d.write, 0)))
	if !d.closed {
		return append(b, 0)
	}
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(d.reason+1))
	b = binary.LittleEndian.AppendUint32(b, d.user)
	b = binary.AppendUvarint(b, uint64(max(d.ms, 0)))
	b = binary.AppendVarint(b, int64(d.dur))
	return binary.AppendVarint(b, int64(d.size))
}

// rawSections returns the sections that z, the compressed entries of a
// sparse minute's part, hold of the specs whose keys can start with
// prefix: its entries summed (rawSums) and encoded as series lists.
func rawSections(z []byte, prefix string) ([]section, error) {
	body, err := s2.Decode(nil, z)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	d := decoder{Dec: codec.NewDec(body)}
	specs := make([]Spec, d.Count(1))
	for i := range specs {
		specs[i] = Spec(d.Bytes(d.Count(1)))
	}
	names := make([]record.Dim, d.Count(1))
	for i := range names {
		names[i] = record.Dim(d.Bytes(d.Count(1)))
	}
	if d.Err() != nil {
		return nil, d.Err()
	}
	dims := make([][]int, len(specs))
	for i, s := range specs {
		for _, dim := range s.Dims() {
			k := slices.Index(names, dim)
			if k < 0 {
				return nil, fmt.Errorf("%w: spec %q of a minute's entries has no values of %q", errCorrupt, s, dim)
			}
			dims[i] = append(dims[i], k)
		}
	}
	raw := make([]rawEntry, d.Count(4+len(names)))
	vals := make([]string, len(raw)*len(names))
	for i := range raw {
		e := &raw[i]
		e.vals = vals[i*len(names) : (i+1)*len(names) : (i+1)*len(names)]
		for k := range e.vals {
			// The body is this call's, never written: the values can be
			// its bytes (the series keys built of them are copies).
			if v := d.Bytes(d.Count(1)); len(v) > 0 {
				e.vals[k] = unsafe.String(&v[0], len(v))
			}
		}
		d.delta(&e.d)
	}
	d.Done()
	if d.Err() != nil {
		return nil, d.Err()
	}
	sums := rawSums(raw, specs, dims, prefix)
	out := make([]section, 0, len(specs))
	for _, s := range specs {
		sp := string(s) + "\x00"
		var keys []string
		for k := range sums {
			if strings.HasPrefix(k, sp) {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			continue
		}
		slices.Sort(keys)
		b := binary.AppendUvarint(nil, uint64(len(keys)))
		var ab []byte
		for _, k := range keys {
			b = codec.AppendString(b, k)
			ab = appendAgg(ab[:0], sums[k])
			b = codec.AppendBytes(b, ab)
		}
		out = append(out, section{b})
	}
	return out, nil
}

// delta reads an entry's delta (appendDelta).
func (d *decoder) delta(x *delta) {
	x.read, x.readv, x.write = int64(d.Uvarint()&math.MaxInt64), int64(d.Uvarint()&math.MaxInt64), int64(d.Uvarint()&math.MaxInt64)
	switch d.Byte() {
	case 0:
		return
	case 1:
	default:
		d.Fail("unknown entry kind")
		return
	}
	x.closed = true
	x.reason = d.Index(numReasons+1) - 1
	x.user = d.Uint32LE()
	x.ms = int64(d.Uvarint() & math.MaxInt64)
	x.dur, x.size = d.Int16(), d.Int16()
}

// sections calls fn with each spec of m and its compressed series, in
// spec order; z is valid during the call only.
func (e *partEncoder) sections(m map[string]*Agg, fn func(spec string, z []byte)) {
	e.series = e.series[:0]
	for k, a := range m {
		e.series = append(e.series, keyed{k, a})
	}
	// A spec's keys are together: a key starts with its spec and a zero byte.
	slices.SortFunc(e.series, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	for i := 0; i < len(e.series); {
		spec, _, _ := strings.Cut(e.series[i].key, "\x00")
		j := i
		for j < len(e.series) && len(e.series[j].key) > len(spec) && e.series[j].key[len(spec)] == 0 && e.series[j].key[:len(spec)] == spec {
			j++
		}
		e.body = binary.AppendUvarint(e.body[:0], uint64(j-i))
		for _, s := range e.series[i:j] {
			e.body = codec.AppendString(e.body, s.key)
			e.ab = appendAgg(e.ab[:0], s.agg)
			e.body = codec.AppendBytes(e.body, e.ab)
		}
		e.ab = s2.Encode(e.ab[:cap(e.ab)], e.body)
		fn(spec, e.ab)
		i = j
	}
}

// room returns the arena with room for n more bytes (a new one when it
// has not).
func (e *partEncoder) room(n int) []byte {
	if cap(e.out)-len(e.out) < n {
		e.out = make([]byte, 0, max(n, 256<<10))
	}
	return e.out
}

// specPart is the stored part of one spec's series.
type specPart struct {
	spec string
	data []byte
}

// rows returns the store rows of parts.
func rows(step, start, part int64, parts []specPart) []store.RollupPart {
	out := make([]store.RollupPart, len(parts))
	for i, p := range parts {
		out[i] = store.RollupPart{Step: step, Start: start, Part: part, Spec: p.spec, Data: p.data}
	}
	return out
}

// mergePart adds the series of a stored part whose key starts with prefix
// (every series when prefix is "") to m.
func mergePart(m map[string]*Agg, data []byte, prefix string) error {
	return walkStored(data, walk{prefix: prefix}, func(key string, a *Agg) { mergeInto(m, key, a) })
}

// mergeInto adds a to m's series key (a copy of a when m has none: a is
// walkStored's, valid during its call only).
func mergeInto(m map[string]*Agg, key string, a *Agg) {
	if cur := m[key]; cur != nil {
		cur.Merge(a)
	} else {
		m[key] = a.clone()
	}
}

// walk says which series of a part to decode, and how much of them.
type walk struct {
	prefix string                // keys that start with it ("": all); a spec and its zero byte reads that spec's section only
	keep   func(key string) bool // nil: all
	light  bool                  // the sums only (bytes, transfers), not the users nor the distributions
}

// walkStored calls fn with each series of a stored part that w selects.
// The Agg is decoded into one reused for every series: fn must not keep
// it (mergeInto copies it when it keeps it), so that merging parts into
// series that exist already allocates nothing.
func walkStored(data []byte, w walk, fn func(key string, a *Agg)) error {
	secs, err := sectionsOf(data, w.prefix)
	if err != nil {
		return err
	}
	for _, sc := range secs {
		if err := walkSeries(&decoder{Dec: codec.NewDec(sc.raw)}, w, fn); err != nil {
			return err
		}
	}
	return nil
}

// section is a decompressed list of series of a part.
type section struct {
	raw []byte
}

// sectionsOf returns the decompressed sections of a stored part that can
// hold keys starting with prefix: a prefix of a spec and its zero byte
// selects that spec's section only.
func sectionsOf(data []byte, prefix string) ([]section, error) {
	if len(data) >= 2 && data[0] == 0 && data[1] == rawVersion {
		d := decoder{Dec: codec.NewDec(data[2:])}
		z := d.UvarintBytes()
		if d.Done(); d.Err() != nil {
			return nil, d.Err()
		}
		return rawSections(z, prefix)
	}
	if len(data) < 2 || data[0] != 0 || data[1] != partVersion {
		return nil, fmt.Errorf("%w: not a part of version %d or %d", errCorrupt, partVersion, rawVersion)
	}
	d := decoder{Dec: codec.NewDec(data[2:])}
	spec, whole := strings.CutSuffix(prefix, "\x00")
	whole = whole && !strings.Contains(spec, "\x00")
	var out []section
	for range d.Count(2) {
		s := d.Bytes(d.Count(1))
		z := d.Bytes(d.Count(1))
		if d.Err() != nil {
			return nil, d.Err()
		}
		if whole && string(s) != spec {
			continue
		}
		raw, err := s2.Decode(nil, z)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errCorrupt, err)
		}
		out = append(out, section{raw})
	}
	return out, d.Err()
}

// walkSeries calls fn with each series of d, a list of series of a part,
// that w selects.
func walkSeries(d *decoder, w walk, fn func(key string, a *Agg)) error {
	var a Agg
	for range d.Count(2) {
		key := d.Bytes(d.Count(1))
		ab := d.Bytes(d.Count(1))
		if d.Err() != nil {
			return d.Err()
		}
		if len(key) < len(w.prefix) || string(key[:len(w.prefix)]) != w.prefix || (w.keep != nil && !w.keep(string(key))) {
			continue
		}
		a.reset()
		ad := decoder{Dec: codec.NewDec(ab)}
		if w.light {
			ad.sums(&a)
		} else {
			ad.agg(&a)
		}
		if ad.Err() != nil {
			return ad.Err()
		}
		fn(string(key), &a)
	}
	return d.Err()
}
