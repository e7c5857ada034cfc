package packet

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"
)

// mapFixed is the fixed part of a map record: header and dictid (§2).
const mapFixed = HeaderSize + 4

// Map is a decoded map record ('=', 'd', 'i', 'p', 'T', 'u', 'U', 'x').
// Its byte slices are views into the datagram.
type Map struct {
	Header
	DictID uint32 // 0 for '=', 'p' and 'x'
	// Info is the record text up to its first NUL, if any (§2: a payload
	// too long for the server's buffer is cut and NUL-terminated, and what
	// follows the NUL is garbage).
	Info []byte
}

// DecodeMap decodes a map record. The text must be non-empty and valid
// UTF-8; a record that fails either is rejected whole (ErrEmptyText,
// ErrNotUTF8), as the identity it carries cannot be trusted.
func DecodeMap(b []byte) (Map, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return Map{}, err
	}
	switch h.Code {
	case CodeIdent, CodePath, CodeInfo, CodePurge, CodeToken, CodeUser, CodeUEAC, CodeXfer:
	default:
		return Map{}, ErrUnknownCode
	}
	if len(b) < mapFixed {
		return Map{}, ErrShort
	}
	info := b[mapFixed:]
	if i := bytes.IndexByte(info, 0); i >= 0 {
		info = info[:i]
	}
	if len(info) == 0 {
		return Map{}, ErrEmptyText
	}
	if !utf8.Valid(info) {
		return Map{}, ErrNotUTF8
	}
	return Map{Header: h, DictID: binary.BigEndian.Uint32(b[8:12]), Info: info}, nil
}

// Split returns the user id text and the payload after the first newline
// (empty when there is none). x records have two newlines; only the first
// one separates the user id (§2.9).
func (m Map) Split() (userID, payload []byte) {
	return splitInfo(m.Info)
}

func splitInfo(info []byte) (userID, payload []byte) {
	if i := bytes.IndexByte(info, '\n'); i >= 0 {
		return info[:i], info[i+1:]
	}
	return info, nil
}

// UserID is the parsed user id text `prot/user.pid:sid@host` (§2.1).
type UserID struct {
	Prot []byte // xroot, http, https...; "=" for a server ident; empty for FRM records
	User []byte // client user name (up to the first '.')
	PID  []byte // session number or pid
	SID  []byte // the server's sID in decimal
	Host []byte // client host name or address; IPv6 in brackets
	// Raw is true when the text did not have the `user.pid:sid@host` shape
	// (the producer then sends the raw link id); User then holds the whole
	// text after the protocol.
	Raw bool
}

// ParseUserID splits a user id as the producer builds it: prot up to the
// first '/', user up to the first '.', pid up to the next ':', sid up to the
// next '@', the rest is the host. FRM user ids have no "prot/" part; pass
// hasProt false for them.
func ParseUserID(b []byte, hasProt bool) UserID {
	var u UserID
	if hasProt {
		if i := bytes.IndexByte(b, '/'); i >= 0 {
			u.Prot, b = b[:i], b[i+1:]
		}
	}
	dot := bytes.IndexByte(b, '.')
	if dot < 0 {
		u.User, u.Raw = b, true
		return u
	}
	rest := b[dot+1:]
	colon := bytes.IndexByte(rest, ':')
	if colon < 0 {
		u.User, u.Raw = b, true
		return u
	}
	at := bytes.IndexByte(rest[colon+1:], '@')
	if at < 0 {
		u.User, u.Raw = b, true
		return u
	}
	u.User = b[:dot]
	u.PID = rest[:colon]
	u.SID = rest[colon+1 : colon+1+at]
	u.Host = rest[colon+1+at+1:]
	return u
}

// SIDValue returns the numeric server id, when SID is a decimal number.
func (u UserID) SIDValue() (uint64, bool) {
	return parseUint(u.SID)
}

// KVIter iterates over `&key=value` pairs of a map record payload. Keys can
// repeat; values are not escaped and may contain '=', '/', ':' and spaces
// but not '&' (§9.11). Use it as:
//
//	kv := packet.KV(payload)
//	for kv.Next() { use(kv.Key, kv.Value) }
type KVIter struct {
	rest       []byte
	Key, Value []byte
}

// KV returns an iterator over the pairs in b.
func KV(b []byte) KVIter { return KVIter{rest: b} }

// Next advances to the next pair; it returns false at the end. Empty
// segments (e.g. a leading '&') are skipped.
//
// Pairs are short, so one plain loop that finds both the '=' and the '&'
// beats two bytes.IndexByte calls (it halves the cost of ParseLogin).
func (it *KVIter) Next() bool {
	for len(it.rest) > 0 {
		b := it.rest
		i := 0
		for i < len(b) && b[i] != '=' && b[i] != '&' {
			i++
		}
		if i == len(b) || b[i] == '&' {
			if i < len(b) {
				it.rest = b[i+1:]
			} else {
				it.rest = nil
			}
			if i == 0 {
				continue
			}
			it.Key, it.Value = b[:i], nil
			return true
		}
		it.Key = b[:i]
		v := b[i+1:]
		j := 0
		for j < len(v) && v[j] != '&' {
			j++
		}
		it.Value = v[:j]
		if j < len(v) {
			it.rest = v[j+1:]
		} else {
			it.rest = nil
		}
		return true
	}
	return false
}

// Login is the payload of a 'u' record (§2.3). Absent keys are empty.
// Repeated keys keep their last value (a real record carries &I= twice).
type Login struct {
	AuthProt []byte // &p= security protocol (gsi, ztn, sss, ...)
	Name     []byte // &n= authenticated entity name (DN, ...)
	Host     []byte // &h= client host as the security layer sees it
	Org      []byte // &o= organisation(s)/VO(s)
	Role     []byte // &r= role(s)
	Groups   []byte // &g= group(s)
	MonInfo  []byte // &m= protocol-specific monitoring info
	Release  []byte // &R= client release
	App      []byte // &x= client application name
	Info     []byte // &y= free-form client info
	IPv      byte   // &I= 4 or 6; 0 when absent
	HasAuth  bool   // the &p= (auth) form
}

// ParseLogin parses the payload of a 'u' record. Unknown keys are ignored.
func ParseLogin(payload []byte) Login {
	var l Login
	kv := KV(payload)
	for kv.Next() {
		if len(kv.Key) != 1 {
			continue
		}
		switch kv.Key[0] {
		case 'p':
			l.AuthProt, l.HasAuth = kv.Value, true
		case 'n':
			l.Name = kv.Value
		case 'h':
			l.Host = kv.Value
		case 'o':
			l.Org = kv.Value
		case 'r':
			l.Role = kv.Value
		case 'g':
			l.Groups = kv.Value
		case 'm':
			l.MonInfo = kv.Value
		case 'R':
			l.Release = kv.Value
		case 'x':
			l.App = kv.Value
		case 'y':
			l.Info = kv.Value
		case 'I':
			if len(kv.Value) == 1 && (kv.Value[0] == '4' || kv.Value[0] == '6') {
				l.IPv = kv.Value[0] - '0'
			}
		}
	}
	return l
}

// ServerIdent is the payload of a '=' record (§2.2).
type ServerIdent struct {
	Site    []byte
	Port    uint16
	Inst    []byte
	Program []byte
	Version []byte // absent for FRM daemons
}

// ParseServerIdent parses the payload of a '=' record.
func ParseServerIdent(payload []byte) (ServerIdent, error) {
	var s ServerIdent
	kv := KV(payload)
	for kv.Next() {
		switch string(kv.Key) {
		case "site":
			s.Site = kv.Value
		case "port":
			p, ok := parseUint(kv.Value)
			if !ok || p > 65535 {
				return s, ErrSyntax
			}
			s.Port = uint16(p)
		case "inst":
			s.Inst = kv.Value
		case "pgm":
			s.Program = kv.Value
		case "ver":
			s.Version = kv.Value
		}
	}
	return s, nil
}

// Token is the payload of a 'T' record (§2.4).
type Token struct {
	UserDictID uint32 // &Uc= the u record this token belongs to
	Subject    []byte // &s=
	Name       []byte // &n=
	Org        []byte // &o=
	Role       []byte // &r=
	Groups     []byte // &g=
}

// ParseToken parses the payload of a 'T' record; &Uc= must be a number.
func ParseToken(payload []byte) (Token, error) {
	var t Token
	seenUc := false
	kv := KV(payload)
	for kv.Next() {
		switch string(kv.Key) {
		case "Uc":
			v, ok := parseUint(kv.Value)
			if !ok || v > 0xFFFFFFFF {
				return t, ErrSyntax
			}
			t.UserDictID, seenUc = uint32(v), true
		case "s":
			t.Subject = kv.Value
		case "n":
			t.Name = kv.Value
		case "o":
			t.Org = kv.Value
		case "r":
			t.Role = kv.Value
		case "g":
			t.Groups = kv.Value
		}
	}
	if !seenUc {
		return t, ErrSyntax
	}
	return t, nil
}

// UEAC is the payload of a 'U' record (§2.5): SciTags experiment and
// activity codes of a user.
type UEAC struct {
	UserDictID uint32 // &Uc=
	Experiment int32  // &Ec=
	Activity   int32  // &Ac=
}

// ParseUEAC parses the payload of a 'U' record; all three keys must be
// numbers.
func ParseUEAC(payload []byte) (UEAC, error) {
	var u UEAC
	var seen uint8
	kv := KV(payload)
	for kv.Next() {
		v, ok := parseUint(kv.Value)
		switch string(kv.Key) {
		case "Uc":
			if !ok || v > 0xFFFFFFFF {
				return u, ErrSyntax
			}
			u.UserDictID, seen = uint32(v), seen|1
		case "Ec":
			if !ok || v > 0x7FFFFFFF {
				return u, ErrSyntax
			}
			u.Experiment, seen = int32(v), seen|2
		case "Ac":
			if !ok || v > 0x7FFFFFFF {
				return u, ErrSyntax
			}
			u.Activity, seen = int32(v), seen|4
		}
	}
	if seen != 7 {
		return u, ErrSyntax
	}
	return u, nil
}

// Purge is the payload of a 'p' FRM purge record (§2.8).
type Purge struct {
	Name     []byte // the purged file
	Tod      int64  // Unix s of the purge
	Size     int64  // bytes
	Atime    int64  // Unix s
	Ctime    int64  // Unix s
	Mtime    int64  // Unix s
	Physical bool   // fn=p: Name is a physical file name (else logical)
}

// ParsePurge parses the payload of a 'p' record: `<name>\n&tod=...`.
func ParsePurge(payload []byte) (Purge, error) {
	var p Purge
	err := parseFRM(payload, &p.Name, &p.Tod, &p.Size, func(k, v []byte) bool {
		switch string(k) {
		case "at":
			p.Atime = parseIntOr(v)
		case "ct":
			p.Ctime = parseIntOr(v)
		case "mt":
			p.Mtime = parseIntOr(v)
		case "fn":
			p.Physical = len(v) == 1 && v[0] == 'p'
		}
		return true
	})
	return p, err
}

// parseFRM parses the payload of a 'p' or 'x' record: what appendFRMHead
// writes (the file's name on its own line, its tod and sz) into name, tod
// and size, and every other key=value with more, which reports whether
// the value is valid.
func parseFRM(payload []byte, name *[]byte, tod, size *int64, more func(k, v []byte) bool) error {
	n, rest := splitInfo(payload)
	if rest == nil {
		return ErrSyntax
	}
	*name = n
	for kv := KV(rest); kv.Next(); {
		switch string(kv.Key) {
		case "tod":
			*tod = parseIntOr(kv.Value)
		case "sz":
			*size = parseIntOr(kv.Value)
		default:
			if !more(kv.Key, kv.Value) {
				return ErrSyntax
			}
		}
	}
	return nil
}

// FRM transfer operations (§2.9).
const (
	XferUnknown      uint8 = 0
	XferCopyIn       uint8 = 1
	XferMigrate      uint8 = 2
	XferMigratePurge uint8 = 3
	XferCopyOut      uint8 = 4
	XferCopyOutPurge uint8 = 5
	XferStage        uint8 = 6
)

// FRMXfer is the payload of an 'x' FRM transfer record (§2.9).
type FRMXfer struct {
	LFN       []byte
	Tod       int64  // Unix s
	Size      int64  // bytes
	QueueTime int64  // s in queue
	XferTime  int64  // s of transfer (>= 1)
	Op        uint8  // Xfer* constant
	RC        int64  // absolute return code; 0 = success
	Detail    []byte // &pd= optional
}

// ParseFRMXfer parses the payload of an 'x' record: `<lfn>\n&tod=...`.
func ParseFRMXfer(payload []byte) (FRMXfer, error) {
	var x FRMXfer
	err := parseFRM(payload, &x.LFN, &x.Tod, &x.Size, func(k, v []byte) bool {
		switch string(k) {
		case "op":
			if len(v) != 1 || v[0] < '0' || v[0] > '6' {
				return false
			}
			x.Op = v[0] - '0'
		case "qt":
			x.QueueTime = parseIntOr(v)
		case "tm":
			x.XferTime = parseIntOr(v)
		case "pd":
			x.Detail = v
		case "rc":
			x.RC = parseIntOr(v)
		}
		return true
	})
	return x, err
}

// parseUint parses a decimal unsigned number without allocating.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (^uint64(0)-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// parseInt parses an optionally signed decimal number.
func parseInt(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg, b = b[0] == '-', b[1:]
	}
	u, ok := parseUint(b)
	if !ok || u > 1<<63 || (!neg && u == 1<<63) {
		return 0, false
	}
	if neg {
		return -int64(u), true
	}
	return int64(u), true
}

func parseIntOr(b []byte) int64 {
	v, _ := parseInt(b)
	return v
}
