package record

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

const progressIDDomain = "xrdmon/progress/v1\x00"

// ProgressID returns the id of the progress snapshot r, a snapshot of an
// open access taken at r.End: deterministic, the same update gives the same
// id, so that the store drops a snapshot a restart makes again.
func ProgressID(r *Record) string {
	var id [32]byte
	return string(AppendProgressID(id[:0], r))
}

// AppendProgressID appends ProgressID(r) to dst (32 bytes), without
// allocating: the store keys a snapshot by a hash of it.
func AppendProgressID(dst []byte, r *Record) []byte {
	var buf [160]byte
	b := append(buf[:0], progressIDDomain...)
	b = appendIdentity(b, r.ServerIP, r.ServerStod, r.ServerID)
	b = binary.BigEndian.AppendUint32(b, r.FileID)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Start.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, uint64(r.End.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, uint64(r.ReadBytes))
	b = binary.BigEndian.AppendUint64(b, uint64(r.ReadvBytes))
	b = binary.BigEndian.AppendUint64(b, uint64(r.WriteBytes))
	sum := sha256.Sum256(b)
	return hex.AppendEncode(dst, sum[:16])
}

// AccessKey identifies one file access across its progress snapshots and
// its record: the server incarnation, the file id and the open time.
type AccessKey struct {
	ServerIP   string
	ServerStod int64
	ServerID   uint64
	FileID     uint32
	Start      int64 // Unix nanoseconds
}

// Access returns r's AccessKey.
func (r *Record) Access() AccessKey {
	return AccessKey{r.ServerIP, r.ServerStod, r.ServerID & 0xFFFFFFFFFFFF, r.FileID, r.Start.UnixNano()}
}
