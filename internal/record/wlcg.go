package record

import (
	"os"
	"strconv"
	"strings"
	"sync"
)

// collectorHost is this machine's host name, written as metadata.host in
// WLCG documents (the OSG collector writes socket.gethostname() there).
var collectorHost = sync.OnceValue(func() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
})

// AppendWLCG appends r in the WLCG GenericFileMonitoring JSON format as the
// OSG xrootd-monitoring-collector produces it (Collectors/wlcg_converter.py,
// Convert), and returns the extended slice. Times are in ms since the Unix
// epoch, as theirs are. unique_id and metadata._id are r.RecordID written
// as a UUID, so the same record always gets the same id; metadata.timestamp
// is r.Received. Differences from their values are listed in
// docs/records.md ("wlcg"). It does not allocate when dst has room.
func AppendWLCG(dst []byte, r *Record) []byte {
	dn := userDN(r)
	host := serverHostname(r)
	startMs, endMs := r.Start.UnixMilli(), r.End.UnixMilli()

	dst = appendKeyString(dst, `{"site_name":`, r.Site)
	dst = appendKeyString(dst, `,"fallback":true,"user_dn":`, dn)
	dst = appendKeyString(dst, `,"client_host":`, r.ClientHost)
	dst = appendKeyString(dst, `,"client_domain":`, clientDomain(r))
	dst = appendKeyString(dst, `,"server_host":`, host)
	dst = appendKeyString(dst, `,"server_domain":`, hostDomain(r.ServerHost))
	dst = appendKeyString(dst, `,"server_ip":`, r.ServerIP)
	dst = append(dst, `,"unique_id":`...)
	dst = appendUUID(dst, r.RecordID)
	dst = appendKeyString(dst, `,"file_lfn":`, r.Path)
	dst = appendKeyInt(dst, `,"file_size":`, fileSize(r))
	dst = appendKeyInt(dst, `,"read_bytes":`, r.ReadBytes+r.ReadvBytes)
	dst = appendKeyInt(dst, `,"read_single_bytes":`, r.ReadBytes)
	dst = appendKeyInt(dst, `,"read_vector_bytes":`, r.ReadvBytes)
	dst = appendKeyBool(dst, `,"ipv6":`, r.IPv6)
	if dn != "" {
		dst = optString(dst, `,"user":`, dnUser(dn))
	}
	dst = appendKeyInt(dst, `,"start_time":`, startMs)
	dst = appendKeyInt(dst, `,"end_time":`, endMs)
	dst = appendKeyInt(dst, `,"operation_time":`, (endMs-startMs)/1000)
	switch {
	case r.ReadBytes > 0 || r.ReadvBytes > 0:
		dst = append(dst, `,"operation":"read"`...)
	case r.WriteBytes > 0:
		dst = append(dst, `,"operation":"write"`...)
	default:
		dst = append(dst, `,"operation":"unknown"`...)
	}
	dst = appendKeyString(dst, `,"server_site":`, r.Site)
	dst = optString(dst, `,"user_protocol":`, r.Protocol)
	dst = optString(dst, `,"vo":`, r.VO)
	dst = appendKeyInt(dst, `,"write_bytes":`, r.WriteBytes)

	// The statistics block: always present, 0 where unknown.
	var s stats
	if r.HasOps {
		s = opStats(r)
	}
	var rdMin, rdMax, rvMin, rvMax, wrMin, wrMax, rsMin, rsMax int64
	var rOps, rvOps, wOps int64
	if r.HasOps {
		rdMin, rdMax, rvMin, rvMax = int64(r.ReadMin), int64(r.ReadMax), int64(r.ReadvMin), int64(r.ReadvMax)
		wrMin, wrMax, rsMin, rsMax = int64(r.WriteMin), int64(r.WriteMax), int64(r.ReadvSegsMin), int64(r.ReadvSegsMax)
		rOps, rvOps, wOps = int64(r.ReadOps), int64(r.ReadvOps), int64(r.WriteOps)
	}
	dst = appendKeyFloat(dst, `,"read_average":`, s.readAvg)
	dst = appendKeyInt(dst, `,"read_bytes_at_close":`, r.ReadBytes+r.ReadvBytes)
	dst = appendKeyInt(dst, `,"read_max":`, int64(s.readMax))
	dst = appendKeyInt(dst, `,"read_min":`, int64(s.readMin))
	dst = appendKeyInt(dst, `,"read_operations":`, s.readOps)
	dst = appendKeyFloat(dst, `,"read_sigma":`, s.readSigma)
	dst = appendKeyFloat(dst, `,"read_single_average":`, s.singleAvg)
	dst = appendKeyInt(dst, `,"read_single_max":`, rdMax)
	dst = appendKeyInt(dst, `,"read_single_min":`, rdMin)
	dst = appendKeyInt(dst, `,"read_single_operations":`, rOps)
	dst = appendKeyFloat(dst, `,"read_single_sigma":`, s.singleSigma)
	dst = appendKeyFloat(dst, `,"read_vector_average":`, s.vectorAvg)
	dst = appendKeyFloat(dst, `,"read_vector_count_average":`, s.countAvg)
	dst = appendKeyInt(dst, `,"read_vector_count_max":`, rsMax)
	dst = appendKeyInt(dst, `,"read_vector_count_min":`, rsMin)
	dst = appendKeyFloat(dst, `,"read_vector_count_sigma":`, s.countSigma)
	dst = appendKeyInt(dst, `,"read_vector_max":`, rvMax)
	dst = appendKeyInt(dst, `,"read_vector_min":`, rvMin)
	dst = appendKeyInt(dst, `,"read_vector_operations":`, rvOps)
	dst = appendKeyFloat(dst, `,"read_vector_sigma":`, s.vectorSigma)
	dst = appendKeyFloat(dst, `,"write_average":`, s.writeAvg)
	dst = appendKeyInt(dst, `,"write_bytes_at_close":`, r.WriteBytes)
	dst = appendKeyInt(dst, `,"write_max":`, wrMax)
	dst = appendKeyInt(dst, `,"write_min":`, wrMin)
	dst = appendKeyInt(dst, `,"write_operations":`, wOps)
	dst = appendKeyFloat(dst, `,"write_sigma":`, s.writeSigma)
	dst = appendSciTags(dst, r)

	if id, workflow, retry, ok := crabInfo(r.AppInfo); ok {
		dst = appendKeyString(dst, `,"CRAB_Id":`, id)
		dst = appendKeyString(dst, `,"CRAB_Retry":`, retry)
		dst = appendKeyString(dst, `,"CRAB_Workflow":`, workflow)
	}

	dst = appendKeyInt(dst, `,"metadata":{"producer":"cms","type":"aaa-ng","timestamp":`, r.Received.UnixMilli())
	dst = appendKeyString(dst, `,"type_prefix":"raw","host":`, collectorHost())
	dst = append(dst, `,"_id":`...)
	dst = appendUUID(dst, r.RecordID)
	return append(dst, "}}"...)
}

// appendUUID writes a 32-hex-character id as a quoted UUID string
// (8-4-4-4-12); any other id is written as a plain string.
func appendUUID(dst []byte, id string) []byte {
	if len(id) != 32 {
		return appendString(dst, id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return appendString(dst, id)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, id[0:8]...)
	dst = append(dst, '-')
	dst = append(dst, id[8:12]...)
	dst = append(dst, '-')
	dst = append(dst, id[12:16]...)
	dst = append(dst, '-')
	dst = append(dst, id[16:20]...)
	dst = append(dst, '-')
	dst = append(dst, id[20:32]...)
	return append(dst, '"')
}

// dnUser is the value of the first CN= attribute of a DN, up to the next
// '/' or ','. For CERN DNs that is the account name
// ("/DC=ch/DC=cern/OU=Users/CN=jdoe/CN=123/CN=John Doe" gives "jdoe").
func dnUser(dn string) string {
	_, after, ok := strings.Cut(dn, "CN=")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(after, "/,"); i >= 0 {
		after = after[:i]
	}
	return after
}

// crabInfo splits CMS CRAB application info of the form
// "<id>_<url ending in /workflow>_<retry>" (exactly three '_'-separated
// parts), as the OSG converter does.
func crabInfo(appInfo string) (id, workflow, retry string, ok bool) {
	if strings.Count(appInfo, "_") != 2 {
		return "", "", "", false
	}
	id, rest, _ := strings.Cut(appInfo, "_")
	url, retry, _ := strings.Cut(rest, "_")
	workflow = url[strings.LastIndexByte(url, '/')+1:]
	return id, workflow, retry, true
}

// WLCGMatcher decides which records also go out in the WLCG format. A
// record matches when one of its VOs equals (ignoring case) one of VOs, or
// its path starts with one of PathPrefixes at a path-component boundary
// ("/store" matches "/store" and "/store/x", not "/storage"). A prefix that
// ends in "/" matches as a plain prefix. A nil matcher matches nothing.
// A matcher is read-only after construction and safe for concurrent use.
type WLCGMatcher struct {
	// VOs are compared with each space- or comma-separated token of
	// Record.VO ("cms cms" is the VO cms).
	VOs []string `yaml:"vos"`
	// PathPrefixes are compared with Record.Path.
	PathPrefixes []string `yaml:"path_prefixes"`
}

// DefaultWLCGMatcher returns the OSG collector's rules: the VOs cms and
// dteam, and the paths under /store and /user/dteam.
func DefaultWLCGMatcher() *WLCGMatcher {
	return &WLCGMatcher{
		VOs:          []string{"cms", "dteam"},
		PathPrefixes: []string{"/store", "/user/dteam"},
	}
}

// Match reports whether r goes out as WLCG.
func (m *WLCGMatcher) Match(r *Record) bool {
	if m == nil {
		return false
	}
	for _, prefix := range m.PathPrefixes {
		if pathHasPrefix(r.Path, prefix) {
			return true
		}
	}
	if len(m.VOs) == 0 {
		return false
	}
	vo := r.VO
	for vo != "" {
		i := strings.IndexAny(vo, " ,")
		tok := vo
		if i >= 0 {
			tok, vo = vo[:i], vo[i+1:]
		} else {
			vo = ""
		}
		if tok == "" {
			continue
		}
		for _, want := range m.VOs {
			if strings.EqualFold(tok, want) {
				return true
			}
		}
	}
	return false
}

func pathHasPrefix(p, prefix string) bool {
	if prefix == "" || !strings.HasPrefix(p, prefix) {
		return false
	}
	return len(p) == len(prefix) || prefix[len(prefix)-1] == '/' || p[len(prefix)] == '/'
}

// appendSciTags appends the SciTags experiment and activity codes (U
// record) when set, as strings, as the Go collector's WLCG and GRACC
// documents carry them.
func appendSciTags(dst []byte, r *Record) []byte {
	if r.Experiment != 0 {
		dst = append(dst, `,"experiment":"`...)
		dst = strconv.AppendInt(dst, int64(r.Experiment), 10)
		dst = append(dst, '"')
	}
	if r.Activity != 0 {
		dst = append(dst, `,"activity":"`...)
		dst = strconv.AppendInt(dst, int64(r.Activity), 10)
		dst = append(dst, '"')
	}
	return dst
}
