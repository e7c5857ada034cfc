package record

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// This file holds the hand-written JSON appenders. They write exactly what
// encoding/json writes for the same values (HTML-safe string escaping,
// invalid UTF-8 replaced by U+FFFD, the same float formatting), but without
// reflection and without allocating when dst has room.

const hexDigits = "0123456789abcdef"

// safeASCII[b] is true for the ASCII bytes that encoding/json writes
// unescaped (it escapes <, > and & for HTML safety).
var safeASCII = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		switch b {
		case '"', '\\', '<', '>', '&':
		default:
			t[b] = true
		}
	}
	return t
}()

// appendString appends s as a quoted JSON string.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendEscaped(dst, s)
	return append(dst, '"')
}

// appendEscaped appends the JSON-escaped content of s, without quotes.
func appendEscaped(dst []byte, s string) []byte {
	start := 0
	i := safePrefix(s)
	if i == len(s) {
		return append(dst, s...)
	}
	for i < len(s) {
		b := s[i]
		if b < utf8.RuneSelf {
			if safeASCII[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}

// safePrefix returns the length of the longest prefix of s that
// appendEscaped writes as it is (bytes of safeASCII), looking at 8 bytes
// at a time: the strings of a record (paths, names) rarely need escaping.
func safePrefix(s string) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		// The high bit of a byte of bad is set where w has a byte below
		// 0x20 or at or above 0x80, or one of " \ < > & (a zero byte
		// of w xor that byte repeated): exact as to whether one is there.
		q, bs, lt, gt, amp := w^('"'*ones), w^('\\'*ones), w^('<'*ones), w^('>'*ones), w^('&'*ones)
		bad := (w-0x20*ones)&^w | w |
			(q-ones)&^q | (bs-ones)&^bs | (lt-ones)&^lt | (gt-ones)&^gt | (amp-ones)&^amp
		if bad&highs != 0 {
			break
		}
	}
	for i < len(s) && s[i] < utf8.RuneSelf && safeASCII[s[i]] {
		i++
	}
	return i
}

// appendTime appends t in UTC as a quoted RFC 3339 string with as many
// fractional digits as needed (time.RFC3339Nano), as encoding/json does for
// a UTC time.
func appendTime(dst []byte, t time.Time) []byte {
	dst = append(dst, '"')
	dst = t.UTC().AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"')
}

// appendFloat appends f the way encoding/json formats a float64. JSON has
// no NaN or infinity; those are written as 0.
func appendFloat(dst []byte, f float64) []byte {
	// Most values of a record are whole numbers (byte counts, averages
	// of equal reads, zeros): below 2^53 strconv writes their digits, as
	// an integer's. Not -0, which it writes with its sign.
	if i := int64(f); float64(i) == f && i > -1<<53 && i < 1<<53 && (i != 0 || !math.Signbit(f)) {
		return strconv.AppendInt(dst, i, 10)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, '0')
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// Turn e-09 into e-9, as encoding/json does.
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, "true"...)
	}
	return append(dst, "false"...)
}

// The appendKey* helpers append `key` and the value; key includes the
// leading comma (or brace), quotes and colon. The opt* helpers do the same
// unless the value is the zero value (omitempty).

func appendKeyString(dst []byte, key, v string) []byte {
	return appendString(append(dst, key...), v)
}

func appendKeyInt(dst []byte, key string, v int64) []byte {
	return strconv.AppendInt(append(dst, key...), v, 10)
}

func appendKeyUint(dst []byte, key string, v uint64) []byte {
	return strconv.AppendUint(append(dst, key...), v, 10)
}

func appendKeyFloat(dst []byte, key string, v float64) []byte {
	return appendFloat(append(dst, key...), v)
}

func appendKeyBool(dst []byte, key string, v bool) []byte {
	return appendBool(append(dst, key...), v)
}

func appendKeyTime(dst []byte, key string, t time.Time) []byte {
	return appendTime(append(dst, key...), t)
}

func optString(dst []byte, key, v string) []byte {
	if v == "" {
		return dst
	}
	return appendKeyString(dst, key, v)
}

func optInt(dst []byte, key string, v int64) []byte {
	if v == 0 {
		return dst
	}
	return appendKeyInt(dst, key, v)
}

func optUint(dst []byte, key string, v uint64) []byte {
	if v == 0 {
		return dst
	}
	return appendKeyUint(dst, key, v)
}

func optBool(dst []byte, key string, v bool) []byte {
	if !v {
		return dst
	}
	return append(append(dst, key...), "true"...)
}

func optFloat(dst []byte, key string, v float64) []byte {
	if v == 0 {
		return dst
	}
	return appendKeyFloat(dst, key, v)
}

// AppendJSON appends the native JSON encoding of r (docs/records.md) to dst
// and returns the extended slice. The output is byte-for-byte what
// encoding/json.Marshal gives for r when r's times are in UTC (times are
// always written in UTC). It does not allocate when dst has room.
func AppendJSON(dst []byte, r *Record) []byte {
	dst = appendKeyString(dst, `{"record_id":`, r.RecordID)
	dst = optString(dst, `,"reason":`, string(r.Reason))
	dst = appendKeyTime(dst, `,"start":`, r.Start)
	dst = appendKeyTime(dst, `,"end":`, r.End)
	dst = optBool(dst, `,"start_unknown":`, r.StartUnknown)
	dst = appendKeyTime(dst, `,"received":`, r.Received)
	dst = optBool(dst, `,"clock_ahead":`, r.ClockAhead)

	dst = appendKeyString(dst, `,"server_ip":`, r.ServerIP)
	dst = optString(dst, `,"server_host":`, r.ServerHost)
	dst = appendKeyUint(dst, `,"server_id":`, r.ServerID)
	dst = appendKeyInt(dst, `,"server_stod":`, r.ServerStod)
	dst = optString(dst, `,"site":`, r.Site)
	dst = optString(dst, `,"instance":`, r.Instance)
	dst = optString(dst, `,"program":`, r.Program)
	dst = optString(dst, `,"version":`, r.Version)

	dst = optString(dst, `,"protocol":`, r.Protocol)
	dst = optString(dst, `,"user":`, r.User)
	dst = optUint(dst, `,"user_dictid":`, uint64(r.UserDictID))
	dst = optString(dst, `,"client_host":`, r.ClientHost)
	dst = optString(dst, `,"client_name":`, r.ClientName)
	dst = optBool(dst, `,"ipv6":`, r.IPv6)
	dst = optString(dst, `,"auth_protocol":`, r.AuthProtocol)
	dst = optString(dst, `,"dn":`, r.DN)
	dst = optString(dst, `,"mon_info":`, r.MonInfo)
	dst = optString(dst, `,"vo":`, r.VO)
	dst = optString(dst, `,"role":`, r.Role)
	dst = optString(dst, `,"groups":`, r.Groups)
	dst = optString(dst, `,"client_release":`, r.ClientRelease)
	dst = optString(dst, `,"app_name":`, r.AppName)
	dst = optString(dst, `,"app_info":`, r.AppInfo)
	dst = optString(dst, `,"token_subject":`, r.TokenSubject)
	dst = optString(dst, `,"token_user":`, r.TokenUser)
	dst = optString(dst, `,"token_org":`, r.TokenOrg)
	dst = optString(dst, `,"token_role":`, r.TokenRole)
	dst = optString(dst, `,"token_groups":`, r.TokenGroups)
	dst = optInt(dst, `,"experiment":`, int64(r.Experiment))
	dst = optInt(dst, `,"activity":`, int64(r.Activity))

	dst = appendKeyUint(dst, `,"file_id":`, uint64(r.FileID))
	dst = optString(dst, `,"path":`, r.Path)
	dst = appendKeyInt(dst, `,"file_size":`, r.FileSize)
	dst = optBool(dst, `,"read_write":`, r.ReadWrite)
	dst = optBool(dst, `,"forced":`, r.Forced)

	dst = appendKeyInt(dst, `,"read_bytes":`, r.ReadBytes)
	dst = appendKeyInt(dst, `,"readv_bytes":`, r.ReadvBytes)
	dst = appendKeyInt(dst, `,"write_bytes":`, r.WriteBytes)

	dst = optBool(dst, `,"has_ops":`, r.HasOps)
	dst = optInt(dst, `,"read_ops":`, int64(r.ReadOps))
	dst = optInt(dst, `,"readv_ops":`, int64(r.ReadvOps))
	dst = optInt(dst, `,"write_ops":`, int64(r.WriteOps))
	dst = optInt(dst, `,"readv_segs":`, r.ReadvSegs)
	dst = optInt(dst, `,"readv_segs_min":`, int64(r.ReadvSegsMin))
	dst = optInt(dst, `,"readv_segs_max":`, int64(r.ReadvSegsMax))
	dst = optInt(dst, `,"read_min":`, int64(r.ReadMin))
	dst = optInt(dst, `,"read_max":`, int64(r.ReadMax))
	dst = optInt(dst, `,"readv_min":`, int64(r.ReadvMin))
	dst = optInt(dst, `,"readv_max":`, int64(r.ReadvMax))
	dst = optInt(dst, `,"write_min":`, int64(r.WriteMin))
	dst = optInt(dst, `,"write_max":`, int64(r.WriteMax))
	dst = optBool(dst, `,"has_ssq":`, r.HasSSQ)
	dst = optFloat(dst, `,"read_sq_sum":`, r.ReadSqSum)
	dst = optFloat(dst, `,"readv_sq_sum":`, r.ReadvSqSum)
	dst = optFloat(dst, `,"readv_seg_sq_sum":`, r.ReadvSegSqSum)
	dst = optFloat(dst, `,"write_sq_sum":`, r.WriteSqSum)
	dst = optInt(dst, `,"redirect_hops":`, int64(r.RedirectHops))
	dst = optInt(dst, `,"redirect_delay_ms":`, r.RedirectDelayMS)
	dst = optInt(dst, `,"redirect_delay_max_ms":`, r.RedirectDelayMaxMS)
	dst = optBool(dst, `,"has_io":`, r.HasIO)
	if r.IO != nil && *r.IO != (IOProfile{}) {
		dst = append(dst, `,"io":`...)
		dst = r.IO.AppendJSON(dst)
	}
	return append(dst, '}')
}

// AppendEventJSON appends the native JSON encoding of e to dst and returns
// the extended slice. e.Data is written as is and must be valid, compact
// JSON as ParseEvent returns it (an empty Data is written as null). For such
// events the output equals encoding/json.Marshal's when the times are in
// UTC. It does not allocate when dst has room.
func AppendEventJSON(dst []byte, e *Event) []byte {
	dst = appendKeyString(dst, `{"event_id":`, e.EventID)
	dst = appendKeyString(dst, `,"type":`, string(e.Type))
	dst = appendKeyString(dst, `,"provider":`, e.Provider)
	dst = appendKeyTime(dst, `,"time":`, e.Time)
	dst = appendKeyTime(dst, `,"received":`, e.Received)
	dst = appendKeyString(dst, `,"server_ip":`, e.ServerIP)
	dst = optString(dst, `,"server_host":`, e.ServerHost)
	dst = appendKeyUint(dst, `,"server_id":`, e.ServerID)
	dst = appendKeyInt(dst, `,"server_stod":`, e.ServerStod)
	dst = optString(dst, `,"site":`, e.Site)
	dst = append(dst, `,"data":`...)
	if len(e.Data) == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, e.Data...)
	}
	dst = appendKeyBool(dst, `,"valid":`, e.Valid)
	return append(dst, '}')
}
