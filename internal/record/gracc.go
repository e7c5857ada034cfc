package record

import (
	"math"
	"strconv"
	"strings"
)

// AppendGRACC appends r as the JSON document that the OSG
// xrootd-monitoring-collector (Collectors/DetailedCollector.py, addRecord)
// publishes to GRACC, and returns the extended slice. Field names, units
// (times in ms since the Unix epoch, operation_time in s) and the
// sentinel strings are theirs; the values are xrdmon's, which differ where
// theirs are wrong (docs/records.md, "gracc"). It does not allocate when dst
// has room.
func AppendGRACC(dst []byte, r *Record) []byte {
	startMs, endMs := r.Start.UnixMilli(), r.End.UnixMilli()
	dst = appendKeyInt(dst, `{"timestamp":`, endMs)
	dst = appendKeyInt(dst, `,"start_time":`, startMs)
	dst = appendKeyInt(dst, `,"end_time":`, endMs)
	dst = append(dst, `,"HasFileCloseMsg":`...)
	if r.Reason == Complete {
		dst = append(dst, '1')
	} else {
		dst = append(dst, '0')
	}
	dst = appendKeyInt(dst, `,"operation_time":`, (endMs-startMs)/1000)

	dst = appendKeyString(dst, `,"server_hostname":`, serverHostname(r))
	dst = appendKeyString(dst, `,"server_ip":`, r.ServerIP)
	dst = append(dst, `,"serverID":"`...)
	dst = appendServerID(dst, r)
	dst = appendKeyString(dst, `","server":`, r.ServerIP)
	dst = appendKeyString(dst, `,"site":`, r.Site)

	if sessionKnown(r) {
		dst = appendKeyString(dst, `,"user":`, r.User)
		dst = appendKeyString(dst, `,"host":`, r.ClientHost)
		dst = optString(dst, `,"user_domain":`, clientDomain(r))
		dst = optString(dst, `,"protocol":`, r.Protocol)
		dst = appendKeyBool(dst, `,"ipv6":`, r.IPv6)
	}
	dst = optString(dst, `,"user_dn":`, userDN(r))
	dst = optString(dst, `,"vo":`, r.VO)
	dst = optString(dst, `,"appinfo":`, r.AppInfo)
	dst = appendTokenFields(dst, r)

	switch {
	case r.Path != "" || r.Reason != NoOpen:
		dst = appendKeyString(dst, `,"filename":`, r.Path)
		dst = appendKeyInt(dst, `,"filesize":`, fileSize(r))
		dst = appendKeyString(dst, `,"dirname1":`, firstComponents(r.Path, 2))
		dst = appendKeyString(dst, `,"dirname2":`, firstComponents(r.Path, 3))
		dst = appendKeyString(dst, `,"logical_dirname":`, logicalDirname(r.Path))
	default:
		dst = append(dst, `,"filename":"missing directory","filesize":-1,"logical_dirname":"missing directory"`...)
	}

	dst = appendKeyInt(dst, `,"read":`, r.ReadBytes)
	dst = appendKeyInt(dst, `,"readv":`, r.ReadvBytes)
	dst = appendKeyInt(dst, `,"write":`, r.WriteBytes)

	if r.HasOps {
		s := opStats(r)
		dst = appendKeyFloat(dst, `,"read_average":`, s.readAvg)
		dst = appendKeyInt(dst, `,"read_bytes_at_close":`, r.ReadBytes+r.ReadvBytes)
		dst = appendKeyInt(dst, `,"read_max":`, int64(s.readMax))
		dst = appendKeyInt(dst, `,"read_min":`, int64(s.readMin))
		dst = appendKeyInt(dst, `,"read_operations":`, s.readOps)
		dst = appendKeyFloat(dst, `,"read_single_average":`, s.singleAvg)
		dst = appendKeyInt(dst, `,"read_single_bytes":`, r.ReadBytes)
		dst = appendKeyInt(dst, `,"read_single_max":`, int64(r.ReadMax))
		dst = appendKeyInt(dst, `,"read_single_min":`, int64(r.ReadMin))
		dst = appendKeyInt(dst, `,"read_single_operations":`, int64(r.ReadOps))
		dst = appendKeyFloat(dst, `,"read_vector_average":`, s.vectorAvg)
		dst = appendKeyFloat(dst, `,"read_vector_count_average":`, s.countAvg)
		dst = appendKeyInt(dst, `,"read_vector_count_max":`, int64(r.ReadvSegsMax))
		dst = appendKeyInt(dst, `,"read_vector_count_min":`, int64(r.ReadvSegsMin))
		dst = appendKeyInt(dst, `,"read_vector_max":`, int64(r.ReadvMax))
		dst = appendKeyInt(dst, `,"read_vector_min":`, int64(r.ReadvMin))
		dst = appendKeyInt(dst, `,"read_vector_operations":`, int64(r.ReadvOps))
		dst = appendKeyFloat(dst, `,"write_average":`, s.writeAvg)
		dst = appendKeyInt(dst, `,"write_bytes_at_close":`, r.WriteBytes)
		dst = appendKeyInt(dst, `,"write_max":`, int64(r.WriteMax))
		dst = appendKeyInt(dst, `,"write_min":`, int64(r.WriteMin))
		dst = appendKeyInt(dst, `,"write_operations":`, int64(r.WriteOps))
		if r.HasSSQ {
			dst = appendKeyFloat(dst, `,"read_sigma":`, s.readSigma)
			dst = appendKeyFloat(dst, `,"read_single_sigma":`, s.singleSigma)
			dst = appendKeyFloat(dst, `,"read_vector_sigma":`, s.vectorSigma)
			dst = appendKeyFloat(dst, `,"read_vector_count_sigma":`, s.countSigma)
			dst = appendKeyFloat(dst, `,"write_sigma":`, s.writeSigma)
		}
	}
	return append(dst, '}')
}

// sessionKnown reports whether the record carries the session of its user
// (the u record was seen). The OSG collector writes user, host, protocol
// and ipv6 only in that case.
func sessionKnown(r *Record) bool { return r.User != "" || r.ClientHost != "" }

// fileSize is the size at open, or -1 when the open was never seen.
func fileSize(r *Record) int64 {
	if r.Reason == NoOpen {
		return -1
	}
	return r.FileSize
}

// serverHostname is the server's name, or its address when it has none.
func serverHostname(r *Record) string {
	if r.ServerHost != "" {
		return r.ServerHost
	}
	return r.ServerIP
}

// userDN is the client certificate DN: the &m= text up to "::" (gsi and
// https logins put the DN there, VOMS logins append "::" and attributes),
// or else &n= when it looks like a DN.
func userDN(r *Record) string {
	if r.MonInfo != "" {
		dn, _, _ := strings.Cut(r.MonInfo, "::")
		if dn != "" && !strings.HasPrefix(dn, "&") {
			return dn
		}
	}
	if strings.HasPrefix(r.DN, "/") || strings.Contains(r.DN, "CN=") {
		return r.DN
	}
	return ""
}

// clientDomain is the last two labels of the client's host name: the
// reverse-DNS name when there is one, otherwise the host from the userid
// when it is a name and not an address.
func clientDomain(r *Record) string {
	if r.ClientName != "" {
		return lastTwoLabels(r.ClientName)
	}
	return hostDomain(r.ClientHost)
}

// hostDomain is the last two labels of host, or "" when host is empty or
// an IP address (bracketed or not).
func hostDomain(host string) string {
	if host == "" || host[0] == '[' || strings.IndexByte(host, ':') >= 0 {
		return ""
	}
	if strings.Trim(host, "0123456789.") == "" {
		return "" // IPv4 literal (a host name's last label is never all digits)
	}
	return lastTwoLabels(host)
}

// lastTwoLabels returns the last two dot-separated labels of name ("a.b.c"
// gives "b.c"); a name without a dot is returned whole. A trailing dot is
// ignored.
func lastTwoLabels(name string) string {
	name = strings.TrimSuffix(name, ".")
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return name
	}
	j := strings.LastIndexByte(name[:i], '.')
	return name[j+1:]
}

// firstComponents returns the first n '/'-separated pieces of p joined by
// '/' (Python's "/".join(p.split("/", n)[:n])): for "/a/b/c", n=2 gives
// "/a" and n=3 gives "/a/b".
func firstComponents(p string, n int) string {
	seen := 0
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			seen++
			if seen == n {
				return p[:i]
			}
		}
	}
	return p
}

// logicalDirname maps a path to the directory the OSG collector reports
// usage under: the same prefix rules, in the same order.
func logicalDirname(p string) string {
	switch {
	case p == "":
		return "unknown directory"
	case strings.HasPrefix(p, "/user"):
		return firstComponents(p, 3)
	case strings.HasPrefix(p, "/osgconnect/public"), strings.HasPrefix(p, "/osgconnect/protected"),
		strings.HasPrefix(p, "/ospool/PROTECTED"):
		return firstComponents(p, 4)
	case strings.HasPrefix(p, "/ospool"):
		return firstComponents(p, 5)
	case strings.HasPrefix(p, "/path-facility"):
		return firstComponents(p, 4)
	case strings.HasPrefix(p, "/hcc"):
		return firstComponents(p, 6)
	case strings.HasPrefix(p, "/pnfs/fnal.gov/usr"):
		return firstComponents(p, 5)
	case strings.HasPrefix(p, "/gwdata"):
		return firstComponents(p, 3)
	case strings.HasPrefix(p, "/chtc/"):
		return "/chtc"
	case strings.HasPrefix(p, "/icecube/"):
		return "/icecube"
	case strings.HasPrefix(p, "/igwn"):
		return firstComponents(p, 4)
	case strings.HasPrefix(p, "/store"):
		return firstComponents(p, 3)
	}
	return "unknown directory"
}

// stats are the derived operation statistics of a record with OPS (and,
// for the sigmas, SSQ).
type stats struct {
	readOps                                 int64
	readMin, readMax                        int32
	readAvg, singleAvg, vectorAvg, countAvg float64
	writeAvg                                float64
	readSigma, singleSigma, vectorSigma     float64
	countSigma, writeSigma                  float64
}

func opStats(r *Record) stats {
	var s stats
	s.readOps = int64(r.ReadOps) + int64(r.ReadvOps)
	s.readAvg = ratio(float64(r.ReadBytes+r.ReadvBytes), s.readOps)
	s.singleAvg = ratio(float64(r.ReadBytes), int64(r.ReadOps))
	s.vectorAvg = ratio(float64(r.ReadvBytes), int64(r.ReadvOps))
	s.countAvg = ratio(float64(r.ReadvSegs), int64(r.ReadvOps))
	s.writeAvg = ratio(float64(r.WriteBytes), int64(r.WriteOps))
	// The smallest and largest single request over read and readv, counting
	// only the kinds that were used (the producer writes 0 for an unused
	// kind's min and max).
	switch {
	case r.ReadOps > 0 && r.ReadvOps > 0:
		s.readMin, s.readMax = min(r.ReadMin, r.ReadvMin), max(r.ReadMax, r.ReadvMax)
	case r.ReadOps > 0:
		s.readMin, s.readMax = r.ReadMin, r.ReadMax
	case r.ReadvOps > 0:
		s.readMin, s.readMax = r.ReadvMin, r.ReadvMax
	}
	if r.HasSSQ {
		s.readSigma = sigma(r.ReadSqSum+r.ReadvSqSum, float64(r.ReadBytes+r.ReadvBytes), s.readOps)
		s.singleSigma = sigma(r.ReadSqSum, float64(r.ReadBytes), int64(r.ReadOps))
		s.vectorSigma = sigma(r.ReadvSqSum, float64(r.ReadvBytes), int64(r.ReadvOps))
		s.countSigma = sigma(r.ReadvSegSqSum, float64(r.ReadvSegs), int64(r.ReadvOps))
		s.writeSigma = sigma(r.WriteSqSum, float64(r.WriteBytes), int64(r.WriteOps))
	}
	return s
}

func ratio(sum float64, n int64) float64 {
	if n <= 0 {
		return 0
	}
	return sum / float64(n)
}

// sigma is the population standard deviation of n values with the given
// sum and sum of squares.
func sigma(sumSq, sum float64, n int64) float64 {
	if n <= 0 {
		return 0
	}
	mean := sum / float64(n)
	v := sumSq/float64(n) - mean*mean
	if v <= 0 {
		return 0
	}
	return math.Sqrt(v)
}

// appendServerID appends the serverID of the GRACC documents, unquoted:
// the server's start time, address and id, joined by '#'.
func appendServerID(dst []byte, r *Record) []byte {
	dst = strconv.AppendInt(dst, r.ServerStod, 10)
	dst = append(dst, '#')
	dst = appendEscaped(dst, r.ServerIP)
	dst = append(dst, '#')
	return strconv.AppendUint(dst, r.ServerID, 10)
}
