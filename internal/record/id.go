package record

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// The id rule (docs/records.md, "record_id"): SHA-256 over a versioned,
// length-prefixed binary encoding of the inputs, truncated to 128 bits and
// written as 32 lowercase hex characters. The same inputs always give the
// same id, on any machine and in any run, so a replay of the same packets
// reproduces the same ids and consumers can drop duplicates.

const (
	recordIDDomain = "xrdmon/record/v1\x00"
	eventIDDomain  = "xrdmon/event/v1\x00"
)

// RecordID returns the deterministic id of the access to file fileID on
// the server (serverIP, stod, sid) that was opened at start and closed (or
// given up as partial) at end. Times are taken at nanosecond resolution in
// UTC, so the location of start and end does not matter.
func RecordID(serverIP string, stod int64, sid uint64, fileID uint32, start, end time.Time) string {
	var buf [128]byte
	b := append(buf[:0], recordIDDomain...)
	b = appendIdentity(b, serverIP, stod, sid)
	b = binary.BigEndian.AppendUint32(b, fileID)
	b = binary.BigEndian.AppendUint64(b, uint64(start.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, uint64(end.UnixNano()))
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// EventID returns the deterministic id of the index-th record (counting
// from 0) of the g-stream packet with sequence number pseq and end time
// tEnd (Unix seconds) sent by provider on the server (serverIP, stod, sid),
// whose text is line. The position and the packet identity are part of the
// hash so that two identical lines (cumulative counters that did not move)
// keep distinct ids, while a duplicate datagram gives the same ids again.
func EventID(serverIP string, stod int64, sid uint64, provider byte, pseq uint8, tEnd int64, index int, line []byte) string {
	var b [32]byte
	return string(AppendEventID(b[:0], serverIP, stod, sid, provider, pseq, tEnd, index, line))
}

// AppendEventID appends EventID's 32 hex digits to dst.
func AppendEventID(dst []byte, serverIP string, stod int64, sid uint64, provider byte, pseq uint8, tEnd int64, index int, line []byte) []byte {
	h := sha256.New()
	var buf [128]byte
	b := append(buf[:0], eventIDDomain...)
	b = appendIdentity(b, serverIP, stod, sid)
	b = append(b, provider, pseq)
	b = binary.BigEndian.AppendUint64(b, uint64(tEnd))
	b = binary.BigEndian.AppendUint32(b, uint32(index))
	b = binary.BigEndian.AppendUint32(b, uint32(len(line)))
	h.Write(b)
	h.Write(line)
	var sum [sha256.Size]byte
	return hex.AppendEncode(dst, h.Sum(sum[:0])[:16])
}

func appendIdentity(b []byte, serverIP string, stod int64, sid uint64) []byte {
	if len(serverIP) > 64 {
		serverIP = serverIP[:64] // an address is never longer; keeps buf on the stack
	}
	b = append(b, byte(len(serverIP)))
	b = append(b, serverIP...)
	b = binary.BigEndian.AppendUint64(b, uint64(stod))
	return binary.BigEndian.AppendUint64(b, sid&0xFFFFFFFFFFFF)
}
