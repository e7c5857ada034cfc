package loadgen

import (
	"strconv"
	"time"
)

// cacheEvent adds an XCache file_close record (protocol reference §6.1) for
// a read access to the server's C buffer.
func (r *run) cacheEvent(s *server, a *access) {
	const blk = 1 << 20
	read := a.fr + a.fv
	nBlks := (a.size + blk - 1) / blk
	hit := int64(float64(read) * s.rng.Float64())
	miss := read - hit
	done := min(nBlks, (hit+miss+blk-1)/blk)
	b := append(r.line[:0], `{"event":"file_close","lfn":"`...)
	b = append(b, r.g.readPaths[a.path].p.b...)
	b = appendIntKey(b, `","size":`, a.size)
	b = appendIntKey(b, `,"blk_size":`, blk)
	b = appendIntKey(b, `,"n_blks":`, nBlks)
	b = appendIntKey(b, `,"n_blks_done":`, done)
	b = appendIntKey(b, `,"access_cnt":`, 1+int64(s.rng.IntN(20)))
	b = appendIntKey(b, `,"attach_t":`, a.start/1000)
	b = appendIntKey(b, `,"detach_t":`, a.closedAt/1000)
	b = append(b, `,"remotes":["origin.loadgen.example:1094"]`...)
	b = appendIntKey(b, `,"b_hit":`, hit)
	b = appendIntKey(b, `,"b_miss":`, miss)
	b = appendIntKey(b, `,"b_bypass":`, 0)
	b = appendIntKey(b, `,"b_todisk":`, miss)
	b = appendIntKey(b, `,"b_prefetch":`, 0)
	b = appendIntKey(b, `,"n_cks_errs":`, 0)
	b = append(b, '}')
	r.line = b
	r.addG(s, 0, b)
}

// tpcEvent adds a third-party-copy record (§6.2) for an access to the
// server's P buffer: a pull from an origin for reads, a push for writes.
func (r *run) tpcEvent(s *server, a *access) {
	ss := &a.sess
	path := r.g.readPaths[a.path].p.b
	kind, size := "pull", a.fr+a.fv
	if a.rw {
		path, kind, size = r.g.writePaths[a.path].p.b, "push", a.fw
	}
	ipv := int64(4)
	if ss.ipv6 {
		ipv = 6
	}
	b := append(r.line[:0], `{"TPC":"xroot","Client":"`...)
	b = append(b, r.g.users[ss.user].name.b...)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(ss.num), 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, uint64(a.fileID%1024), 10)
	b = append(b, '@')
	b = append(b, r.hostOf(ss).name.b...)
	b = append(b, `","Xeq":{"Beg":"`...)
	b = appendTPCTime(b, a.start)
	b = append(b, `","End":"`...)
	b = appendTPCTime(b, a.closedAt)
	b = append(b, `","RC":0,"Strm":`...)
	b = strconv.AppendInt(b, 1+int64(a.fileID%8), 10)
	b = append(b, `,"Type":"`...)
	b = append(b, kind...)
	b = appendIntKey(b, `","IPv":`, ipv)
	b = append(b, `},"Src":"xroot://origin.loadgen.example:1094/`...)
	b = append(b, path...)
	b = append(b, `","Dst":"xroot://`...)
	b = append(b, s.host.b...)
	b = append(b, ":1094/"...)
	b = append(b, path...)
	b = appendIntKey(b, `","Size":`, size)
	b = append(b, '}')
	r.line = b
	r.addG(s, 1, b)
}

func appendIntKey(b []byte, key string, v int64) []byte {
	b = append(b, key...)
	return strconv.AppendInt(b, v, 10)
}

// appendTPCTime appends ms as the producer does: UTC seconds, then the
// microseconds printed with at least 3 digits, then Z.
func appendTPCTime(b []byte, ms int64) []byte {
	t := time.UnixMilli(ms).UTC()
	b = t.AppendFormat(b, "2006-01-02T15:04:05")
	b = append(b, '.')
	us := (ms % 1000) * 1000 // 0, or at least 1000: 3 digits or more
	if us == 0 {
		b = append(b, "000"...)
	} else {
		b = strconv.AppendInt(b, us, 10)
	}
	return append(b, 'Z')
}
