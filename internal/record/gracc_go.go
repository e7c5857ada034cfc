package record

import (
	"path"
	"strconv"
	"strings"
)

// GRACC flavours: which OSG collector's document AppendGRACC-style
// encoders write (docs/records.md §3).
const (
	// GRACCPython is the document of the Python xrootd-monitoring-collector
	// (Collectors/DetailedCollector.py): times in ms, fields left out when
	// unknown. AppendGRACC.
	GRACCPython = "python"
	// GRACCGo is the document of the xrootd-monitoring-shoveler's Go
	// collector mode (collector/correlator.go, CollectorRecord): @timestamp
	// in RFC 3339, times in s, integer averages, every field always
	// written with its placeholder. AppendGRACCGo.
	GRACCGo = "go"
)

// GRACCEncoder returns the GRACC appender of a flavour: "python" (or "",
// the default) or "go".
func GRACCEncoder(flavour string) (func(dst []byte, r *Record) []byte, error) {
	switch flavour {
	case GRACCPython, "":
		return AppendGRACC, nil
	case GRACCGo:
		return AppendGRACCGo, nil
	}
	return nil, errUnknownFlavour(flavour)
}

// ValidGRACCFlavour reports whether flavour names a GRACC document
// ("python" or "go"), the rule of every output's gracc_flavour.
func ValidGRACCFlavour(flavour string) bool {
	return flavour == GRACCPython || flavour == GRACCGo
}

type errUnknownFlavour string

func (e errUnknownFlavour) Error() string {
	return "unknown GRACC flavour " + strconv.Quote(string(e)) + " (want python or go)"
}

// AppendGRACCGo appends r as the JSON document the Go collector mode of
// the OSG xrootd-monitoring-shoveler publishes (its CollectorRecord, field
// for field, in its order, with its names, types, units and placeholders:
// "UNKNOWN" site, "unknown" host, protocol and filename, "unknown
// directory"), and returns the extended slice. Its values follow theirs
// except where theirs come from a wrong clock: @timestamp is r.Received
// (theirs: the collector's clock at the close, which Received is),
// start_time and end_time are the open and close times from the server's
// clock in s (theirs: the server process's start and the collector's
// clock), and serverID is "<stod>#<ip>#<sID>" (docs/records.md §3.4). It
// does not allocate when dst has room.
func AppendGRACCGo(dst []byte, r *Record) []byte {
	start, end := r.Start.Unix(), r.End.Unix()
	known := sessionKnown(r)
	dst = appendKeyTime(dst, `{"@timestamp":`, r.Received)
	dst = appendKeyInt(dst, `,"start_time":`, start)
	dst = appendKeyInt(dst, `,"end_time":`, end)
	dst = appendKeyInt(dst, `,"operation_time":`, end-start)
	dst = append(dst, `,"serverID":"`...)
	dst = appendServerID(dst, r)
	dst = appendKeyString(dst, `","server_hostname":`, serverHostname(r))
	dst = appendKeyString(dst, `,"server":`, r.ServerIP)
	dst = appendKeyString(dst, `,"server_ip":`, r.ServerIP)
	dst = appendKeyString(dst, `,"site":`, orDefault(r.Site, "UNKNOWN"))
	dst = append(dst, `,"user":`...)
	if known {
		dst = appendString(dst, r.User)
	} else {
		// Theirs: the user dictid in hexadecimal, as a signed 32-bit value.
		dst = append(dst, '"')
		dst = strconv.AppendInt(dst, int64(int32(r.UserDictID)), 16)
		dst = append(dst, '"')
	}
	dst = appendKeyString(dst, `,"user_dn":`, userDN(r))
	dst = optString(dst, `,"user_domain":`, clientDomain(r))
	if r.VO != "" {
		dst = append(dst, `,"vo":"`...)
		dst = appendUniqueVO(dst, r.VO)
		dst = append(dst, '"')
	}
	dst = append(dst, `,"host":`...)
	if known {
		dst = appendString(dst, r.ClientHost)
	} else {
		dst = append(dst, `"unknown"`...)
	}
	dst = appendTokenFields(dst, r)
	dst = appendKeyString(dst, `,"filename":`, orDefault(r.Path, "unknown"))
	dst = appendGoDirnames(dst, r.Path)
	dst = append(dst, `,"protocol":`...)
	if known {
		dst = appendString(dst, r.Protocol)
	} else {
		dst = append(dst, `"unknown"`...)
	}
	dst = appendKeyString(dst, `,"appinfo":`, r.AppInfo)
	dst = appendKeyBool(dst, `,"ipv6":`, r.IPv6)
	dst = appendKeyInt(dst, `,"filesize":`, r.FileSize)

	dst = appendKeyInt(dst, `,"read_operations":`, int64(r.ReadOps))
	dst = appendKeyInt(dst, `,"read_single_operations":`, int64(r.ReadOps))
	dst = appendKeyInt(dst, `,"read_vector_operations":`, int64(r.ReadvOps))
	dst = appendKeyInt(dst, `,"write_operations":`, int64(r.WriteOps))
	dst = appendKeyInt(dst, `,"read":`, r.ReadBytes)
	dst = appendKeyInt(dst, `,"read_single_bytes":`, r.ReadBytes)
	dst = appendKeyInt(dst, `,"readv":`, r.ReadvBytes)
	dst = appendKeyInt(dst, `,"write":`, r.WriteBytes)
	dst = appendKeyInt(dst, `,"read_min":`, int64(r.ReadMin))
	dst = appendKeyInt(dst, `,"read_max":`, int64(r.ReadMax))
	dst = appendKeyInt(dst, `,"read_average":`, intAvg(r.ReadBytes, r.ReadOps))
	dst = appendKeyInt(dst, `,"read_single_min":`, int64(r.ReadMin))
	dst = appendKeyInt(dst, `,"read_single_max":`, int64(r.ReadMax))
	dst = appendKeyInt(dst, `,"read_single_average":`, intAvg(r.ReadBytes, r.ReadOps))
	dst = appendKeyInt(dst, `,"read_vector_min":`, int64(r.ReadvMin))
	dst = appendKeyInt(dst, `,"read_vector_max":`, int64(r.ReadvMax))
	dst = appendKeyInt(dst, `,"read_vector_average":`, intAvg(r.ReadvBytes, r.ReadvOps))
	dst = appendKeyInt(dst, `,"write_min":`, int64(r.WriteMin))
	dst = appendKeyInt(dst, `,"write_max":`, int64(r.WriteMax))
	dst = appendKeyInt(dst, `,"write_average":`, intAvg(r.WriteBytes, r.WriteOps))
	dst = appendKeyInt(dst, `,"read_vector_count_min":`, int64(r.ReadvSegsMin))
	dst = appendKeyInt(dst, `,"read_vector_count_max":`, int64(r.ReadvSegsMax))
	dst = appendKeyFloat(dst, `,"read_vector_count_average":`, ratio(float64(r.ReadvSegs), int64(r.ReadvOps)))
	dst = appendKeyInt(dst, `,"read_bytes_at_close":`, r.ReadBytes)
	dst = appendKeyInt(dst, `,"write_bytes_at_close":`, r.WriteBytes)
	// Theirs: 1 on every record (they are made at a close); here 1 when
	// a close was seen (complete and no_open), 0 for the partial records
	// they never write.
	dst = append(dst, `,"HasFileCloseMsg":`...)
	if r.Reason == Complete || r.Reason == NoOpen {
		dst = append(dst, '1')
	} else {
		dst = append(dst, '0')
	}
	return append(dst, '}')
}

// appendTokenFields appends the token (T record) and SciTags (U record)
// fields that are set, with the Go collector's names; both flavours write
// them. experiment and activity are strings, as theirs are.
func appendTokenFields(dst []byte, r *Record) []byte {
	dst = optString(dst, `,"token_subject":`, r.TokenSubject)
	dst = optString(dst, `,"token_username":`, r.TokenUser)
	dst = optString(dst, `,"token_org":`, r.TokenOrg)
	dst = optString(dst, `,"token_role":`, r.TokenRole)
	dst = optString(dst, `,"token_groups":`, r.TokenGroups)
	return appendSciTags(dst, r)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// intAvg is the Go collector's integer average: bytes / calls, truncated;
// 0 without calls.
func intAvg(bytes int64, calls int32) int64 {
	if calls <= 0 {
		return 0
	}
	return bytes / int64(calls)
}

// appendUniqueVO appends the space-separated tokens of vo, escaped, each
// once (compared without case), in their first order: the Go collector's
// normalizeVO ("cms cms" is "cms").
func appendUniqueVO(dst []byte, vo string) []byte {
	first := true
	rest := vo
	for {
		tok, ok := nextField(&rest)
		if !ok {
			return dst
		}
		if seenField(vo, tok, len(vo)-len(rest)-len(tok)) {
			continue
		}
		if !first {
			dst = append(dst, ' ')
		}
		first = false
		dst = appendEscaped(dst, tok)
	}
}

// nextField returns the next whitespace-separated token of *s and moves
// *s past it.
func nextField(s *string) (string, bool) {
	t := strings.TrimLeft(*s, " \t\n\r\v\f")
	if t == "" {
		*s = ""
		return "", false
	}
	i := strings.IndexAny(t, " \t\n\r\v\f")
	if i < 0 {
		*s = ""
		return t, true
	}
	*s = t[i:]
	return t[:i], true
}

// seenField reports whether tok occurs, ignoring case, among the tokens of
// vo[:end].
func seenField(vo, tok string, end int) bool {
	prev := vo[:end]
	for {
		f, ok := nextField(&prev)
		if !ok {
			return false
		}
		if strings.EqualFold(f, tok) {
			return true
		}
	}
}

// appendGoDirnames appends dirname1, dirname2 and logical_dirname as the Go
// collector derives them (extractDirnames): from the cleaned path, "unknown
// directory" for an unknown path, and its prefix rules (those of the Python
// collector, but a path too short for its rule gets dirname2).
func appendGoDirnames(dst []byte, p string) []byte {
	if p == "" || p == "unknown" || p == "/" {
		return append(dst, `,"dirname1":"unknown directory","dirname2":"unknown directory","logical_dirname":"unknown directory"`...)
	}
	clean := path.Clean(p) // does not allocate when p is clean
	rel := strings.TrimPrefix(clean, "/")
	parts := pieces(rel)
	d1, d2 := 1, 2
	if parts < 2 {
		d2 = 1
	}
	dst = append(dst, `,"dirname1":`...)
	if rel == "" || rel[0] == '/' {
		dst = append(dst, `"unknown directory"`...)
	} else {
		dst = appendDirPrefix(dst, rel, d1)
	}
	dst = append(dst, `,"dirname2":`...)
	dst = appendDirPrefix(dst, rel, d2)
	n := 0 // pieces of the logical dirname; 0: unknown directory, -1: a literal
	lit := ""
	atLeast := func(k int) int {
		if parts >= k {
			return k
		}
		return d2
	}
	switch {
	case strings.HasPrefix(clean, "/user"):
		n = d2
	case strings.HasPrefix(clean, "/osgconnect/public"), strings.HasPrefix(clean, "/osgconnect/protected"),
		strings.HasPrefix(clean, "/ospool/PROTECTED"):
		n = atLeast(3)
	case strings.HasPrefix(clean, "/ospool"):
		n = atLeast(4)
	case strings.HasPrefix(clean, "/path-facility"):
		n = atLeast(3)
	case strings.HasPrefix(clean, "/hcc"):
		n = atLeast(5)
	case strings.HasPrefix(clean, "/pnfs/fnal.gov/usr"):
		n = atLeast(4)
	case strings.HasPrefix(clean, "/gwdata"):
		n = d2
	case strings.HasPrefix(clean, "/chtc/"):
		n, lit = -1, "/chtc"
	case strings.HasPrefix(clean, "/icecube/"):
		n, lit = -1, "/icecube"
	case strings.HasPrefix(clean, "/igwn"):
		n = atLeast(3)
	case strings.HasPrefix(clean, "/store"), strings.HasPrefix(clean, "/user/dteam"):
		n = d2
	}
	dst = append(dst, `,"logical_dirname":`...)
	switch {
	case n > 0:
		dst = appendDirPrefix(dst, rel, n)
	case n < 0:
		dst = appendString(dst, lit)
	default:
		dst = append(dst, `"unknown directory"`...)
	}
	return dst
}

// pieces is the number of '/'-separated pieces of rel.
func pieces(rel string) int { return strings.Count(rel, "/") + 1 }

// appendDirPrefix appends, as a JSON string, "/" and the first n
// '/'-separated pieces of rel.
func appendDirPrefix(dst []byte, rel string, n int) []byte {
	end := len(rel)
	seen := 0
	for i := 0; i < len(rel); i++ {
		if rel[i] == '/' {
			seen++
			if seen == n {
				end = i
				break
			}
		}
	}
	dst = append(dst, `"/`...)
	dst = appendEscaped(dst, rel[:end])
	return append(dst, '"')
}
