package correlate

import (
	"bytes"
	"hash/maphash"
	"strconv"

	"github.com/xrdmon/xrdmon/internal/packet"
)

// A session's userid text ("prot/user.pid:sid@host") keys the
// incarnation's byText index (the latest session of each text), which
// links path and info records to their session. A session keeps it as
// its parts, not as a string of its own: prot, user and host are
// interned names it keeps anyway, and pid and sid are numbers. The text
// is built again from them when it is needed (appendText), and kept as a
// string (textRaw) only when its parts do not spell it exactly (no
// `user.pid:sid@host` shape, numbers with leading zeros, invalid UTF-8):
// a login then costs no allocation for its text.
//
// byText is keyed by a hash of the text seeded per shard (textKey), and a
// lookup compares the text of the session it finds with the one asked
// for: a collision of two texts (about 1 in 10^19 a pair, and no sender
// can aim at one) can lose a link, never make a wrong one.

// textKey returns the byText key of a userid text.
func (s *Shard) textKey(uid []byte) uint64 { return maphash.Bytes(s.textSeed, uid) }

// setText keeps uid as ss's userid text; u is uid parsed, and ss.prot,
// ss.user and ss.host are set from it.
func (s *Shard) setText(ss *session, uid []byte, u packet.UserID) {
	ss.textKey, ss.textRaw = s.textKey(uid), ""
	var ok bool
	if ss.pid, ok = decimal(u.PID, 19); ok && !u.Raw {
		if ss.sid, ok = decimal(u.SID, 19); ok && sameText(ss, uid) {
			return // the parts spell it (FuzzSameText holds sameText to appendText)
		}
	}
	ss.pid, ss.sid, ss.textRaw = 0, 0, string(uid)
}

// appendText appends ss's userid text to b.
func appendText(b []byte, ss *session) []byte {
	if ss.textRaw != "" {
		return append(b, ss.textRaw...)
	}
	if ss.prot != "" {
		b = append(append(b, ss.prot...), '/')
	}
	b = append(append(b, ss.user...), '.')
	b = append(strconv.AppendUint(b, ss.pid, 10), ':')
	b = append(strconv.AppendUint(b, ss.sid, 10), '@')
	return append(b, ss.host...)
}

// sameText reports whether ss's userid text is uid: appendText's text,
// matched part by part without building it.
func sameText(ss *session, uid []byte) bool {
	if ss.textRaw != "" {
		return ss.textRaw == string(uid)
	}
	b, ok := uid, true
	if ss.prot != "" {
		b, ok = cutText(b, ss.prot, '/')
	}
	if ok {
		b, ok = cutText(b, ss.user, '.')
	}
	if ok {
		b, ok = cutNumber(b, ss.pid, ':')
	}
	if ok {
		b, ok = cutNumber(b, ss.sid, '@')
	}
	return ok && string(b) == ss.host
}

// cutText returns what follows text and sep at the start of b.
func cutText(b []byte, text string, sep byte) ([]byte, bool) {
	n := len(text)
	if len(b) <= n || b[n] != sep || string(b[:n]) != text {
		return nil, false
	}
	return b[n+1:], true
}

// cutNumber returns what follows v's decimal digits (as strconv writes
// them) and sep at the start of b.
func cutNumber(b []byte, v uint64, sep byte) ([]byte, bool) {
	i := bytes.IndexByte(b, sep)
	if i < 1 || (i > 1 && b[0] == '0') {
		return nil, false
	}
	if n, ok := decimal(b[:i], 19); !ok || n != v {
		return nil, false
	}
	return b[i+1:], true
}

// textLen is the length of ss's userid text as a string of its own (what
// the session's memory counts).
func textLen(ss *session) int64 { return int64(len(ss.textRaw)) }

// sessionOfText returns the latest session of inc whose userid text is
// uid.
func (s *Shard) sessionOfText(inc *incarnation, uid []byte) (int32, bool) {
	i, ok := inc.byText.get(s.textKey(uid))
	if !ok || !sameText(s.sess.at(i), uid) {
		return -1, false
	}
	return i, true
}

// unindexText takes session i out of inc's byText index if it is its
// text's latest session.
func unindexText(inc *incarnation, ss *session, i int32) {
	if j, ok := inc.byText.get(ss.textKey); ok && j == i {
		inc.byText.del(ss.textKey)
	}
}

// decimal parses b as a decimal number of at most maxDigits digits: 19
// for a value a uint64 always holds; with 20 a larger one wraps.
func decimal(b []byte, maxDigits int) (uint64, bool) {
	if len(b) == 0 || len(b) > maxDigits {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}
