package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/klauspost/compress/s2"

	"github.com/xrdmon/xrdmon/internal/codec"
	"github.com/xrdmon/xrdmon/internal/record"
)

// A block is a run of consecutive log entries stored as one row of the
// blocks table (FORMAT.md, "Blocks"). Its data column is a codec byte
// followed by the entry list compressed as one S2 block:
//
//	entry := kind byte (0 record, 1 event, 2 progress snapshot)
//	         uvarint  seq - previous entry's seq (the first: seq - first_seq + 1)
//	         8 bytes  entryID of the record or event id (a progress
//	                  snapshot: record.ProgressID), little endian
//	         uvarint  n
//	         n bytes  the entry in record's binary form (record.AppendBinary
//	                  for a record or a progress snapshot,
//	                  record.AppendEventBinary)
//
// Entries are in seq order. Within a block written by Append the seqs are
// consecutive; blocks migrated from version 3 may have gaps.

// blockCodecS2 is the codec byte of an S2-compressed entry list.
const blockCodecS2 = 1

// maxBlockEntries bounds the entries of one block: a reader decompresses a
// whole block to get at one entry, so blocks stay around 1-2 MB of entries
// (at ~470 bytes a record) and 150-600 KB compressed.
const maxBlockEntries = 4096

// maxBlockBytes bounds the uncompressed entries of one block as well: a
// block is sealed once they reach it, so that a run of large entries (a
// summary event is up to ~130 KB) never makes a block, the builder's
// buffers or a reader's cache hundreds of megabytes. A single entry larger
// than it is a block of its own.
const maxBlockBytes = 4 << 20

// Entry kinds in a block. A progress snapshot (schema version 9) is a
// record without a RecordID: the bytes an access still open has moved so
// far, for the rollups (Entry.Progress).
const (
	entryRecord   = 0
	entryEvent    = 1
	entryProgress = 2
)

// errBlockCorrupt is returned for a block that does not decode.
var errBlockCorrupt = errors.New("corrupt block")

// blockBuilder accumulates the entries of one block.
type blockBuilder struct {
	raw      []byte // the uncompressed entry list
	first    int64  // seq of the first entry
	last     int64  // seq of the last entry
	n        int
	records  int
	events   int // events and progress snapshots
	minNs    int64
	maxNs    int64
	names    map[int64]struct{} // dictionary ids to post in block_names
	nameList []int64
	enc      []byte // S2 output, reused
	comp     []byte // codec byte + enc
}

func newBlockBuilder() *blockBuilder {
	return &blockBuilder{raw: make([]byte, 0, 2<<20), names: make(map[int64]struct{})}
}

// reset starts a new block whose first entry will have seq first.
func (b *blockBuilder) reset(first int64) {
	if cap(b.raw) > 2*maxBlockBytes { // after one oversized entry
		b.raw, b.enc, b.comp = make([]byte, 0, 2<<20), nil, nil
	}
	b.raw = b.raw[:0]
	b.first, b.last = first, first-1
	b.n, b.records, b.events = 0, 0, 0
	b.minNs, b.maxNs = 0, 0
	clear(b.names)
	b.nameList = b.nameList[:0]
}

// add appends an entry with the given seq (greater than the last one).
func (b *blockBuilder) add(kind byte, seq int64, rid uint64, t int64, data []byte) {
	b.raw = append(b.raw, kind)
	b.raw = binary.AppendUvarint(b.raw, uint64(seq-b.last))
	b.raw = binary.LittleEndian.AppendUint64(b.raw, rid)
	b.raw = binary.AppendUvarint(b.raw, uint64(len(data)))
	b.raw = append(b.raw, data...)
	b.last = seq
	b.n++
	if kind == entryRecord {
		b.records++
	} else {
		b.events++
	}
	if t != 0 {
		if b.minNs == 0 || t < b.minNs {
			b.minNs = t
		}
		if t > b.maxNs {
			b.maxNs = t
		}
	}
}

// full reports whether the block must be sealed before another entry.
func (b *blockBuilder) full() bool { return b.n >= maxBlockEntries || len(b.raw) >= maxBlockBytes }

// post adds a dictionary id to the block's postings (0, the empty name, is
// not posted).
func (b *blockBuilder) post(id int64) {
	if id != 0 {
		b.names[id] = struct{}{}
	}
}

// finish compresses the block and returns its data column and its sorted
// name ids encoded as the names column (uvarint deltas).
func (b *blockBuilder) finish() (data, names []byte) {
	b.enc = s2.Encode(b.enc[:cap(b.enc)], b.raw)
	b.comp = append(append(b.comp[:0], blockCodecS2), b.enc...)
	for id := range b.names {
		b.nameList = append(b.nameList, id)
	}
	slices.Sort(b.nameList)
	return b.comp, encodeIDs([]byte{}, b.nameList)
}

// encodeIDs appends sorted ids as uvarint deltas.
func encodeIDs(dst []byte, ids []int64) []byte {
	prev := int64(0)
	for _, id := range ids {
		dst = binary.AppendUvarint(dst, uint64(id-prev))
		prev = id
	}
	return dst
}

// decodeIDs reads the names column of a block.
func decodeIDs(b []byte) ([]int64, error) {
	var out []int64
	prev := int64(0)
	for d := codec.NewDec(b); d.Len() > 0; {
		prev += int64(d.Uvarint())
		if d.Err() != nil {
			return nil, fmt.Errorf("block names: %w", errBlockCorrupt)
		}
		out = append(out, prev)
	}
	return out, nil
}

// blockEntries decompresses a block's data column into dst (reused) and
// returns the raw entry list.
func blockEntries(dst, data []byte) ([]byte, error) {
	if len(data) == 0 || data[0] != blockCodecS2 {
		return nil, fmt.Errorf("block codec: %w", errBlockCorrupt)
	}
	n, err := s2.DecodedLen(data[1:])
	if err != nil {
		return nil, fmt.Errorf("block length: %w: %v", errBlockCorrupt, err)
	}
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	raw, err := s2.Decode(dst[:n], data[1:])
	if err != nil {
		return nil, fmt.Errorf("block decompress: %w: %v", errBlockCorrupt, err)
	}
	return raw, nil
}

// recordSlab gives out the records a read decodes, up to recordSlabLen to
// an allocation: a reader of the log (an output, the rollups catching up)
// reads thousands at a time and drops them together.
type recordSlab []record.Record

const recordSlabLen = 256

// next returns a zero record of the slab; left is how many the read may
// still want (a new allocation holds no more than that).
func (s *recordSlab) next(left int) *record.Record {
	if len(*s) == cap(*s) {
		*s = make([]record.Record, 0, max(min(left, recordSlabLen), 1))
	}
	*s = (*s)[:len(*s)+1]
	return &(*s)[len(*s)-1]
}

// rawEntry is one entry of a decompressed block; data points into the
// block.
type rawEntry struct {
	kind byte
	seq  int64
	rid  uint64
	data []byte
}

// entryIter walks a decompressed entry list.
type entryIter struct {
	d    codec.Dec
	seq  int64
	err  error
	cur  rawEntry
	done bool
}

func newEntryIter(raw []byte, firstSeq int64) entryIter {
	return entryIter{d: codec.NewDec(raw), seq: firstSeq - 1}
}

// next advances to the next entry; it returns false at the end or on a
// corrupt entry (then err is set).
func (it *entryIter) next() bool {
	if it.done || it.d.Len() == 0 {
		it.done = true
		return false
	}
	kind := it.d.Byte()
	delta := it.d.Uvarint()
	rid := it.d.Uint64LE()
	data := it.d.UvarintBytes()
	if it.d.Err() != nil || delta == 0 || kind > entryProgress {
		it.err = errBlockCorrupt
		it.done = true
		return false
	}
	it.seq += int64(delta)
	it.cur = rawEntry{kind: kind, seq: it.seq, rid: rid, data: data}
	return true
}

// decodeEntry decodes a raw entry into a store Entry, a record into recs
// (left: how many entries the read may still return).
func decodeEntry(r rawEntry, recs *recordSlab, left int) (Entry, error) {
	e := Entry{Seq: r.seq}
	var err error
	switch r.kind {
	case entryRecord:
		e.Record = recs.next(left)
		err = record.DecodeStored(r.data, e.Record)
	case entryProgress:
		e.Progress = recs.next(left)
		err = record.DecodeBinary(r.data, e.Progress)
	default:
		e.Event = new(record.Event)
		err = record.DecodeStoredEvent(r.data, e.Event)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("decode seq %d: %w", r.seq, err)
	}
	return e, nil
}
