package record

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// This file generates g-stream lines for the benchmark and the
// differential tests: well-formed lines in each producer's format (C and P
// as internal/loadgen writes them) and mutations of them.

var corpusPaths = []string{
	"/store/mc/RunIII/TTbar/AODSIM/f0001.root",
	"/store/data/Run2026A/Muon/MINIAOD/abc-def.root",
	"/atlas/rucio/data26:DAOD_PHYS.12345._000001.pool.root.1",
	"/data/we\"ird\\path\\n.root",
	"/d/\xff\xfe.root",
	"/x/<b>&amp;\u2028\u00e9.root",
	"/tab\there",
}

// genCacheLine returns a provider C file_close line as XrdPfc writes it.
func genCacheLine(r *rand.Rand, path string) string {
	const blk = 1 << 20
	size := r.Int64N(1 << 34)
	nBlks := (size + blk - 1) / blk
	read := r.Int64N(size + 1)
	hit := int64(float64(read) * r.Float64())
	miss := read - hit
	var b strings.Builder
	fmt.Fprintf(&b, `{"event":"file_close","lfn":"%s","size":%d,"blk_size":%d,"n_blks":%d,"n_blks_done":%d,`,
		path, size, blk, nBlks, min(nBlks, (read+blk-1)/blk))
	fmt.Fprintf(&b, `"access_cnt":%d,"attach_t":%d,"detach_t":%d,"remotes":[`, 1+r.IntN(20), 1758000000+r.IntN(1e6), 1759000000+r.IntN(1e6))
	for i := range r.IntN(3) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"origin%d.example.org:1094"`, i)
	}
	fmt.Fprintf(&b, `],"b_hit":%d,"b_miss":%d,"b_bypass":%d,"b_todisk":%d,"b_prefetch":%d,"n_cks_errs":%d}`,
		hit, miss, r.IntN(2)*r.IntN(1<<20), miss, r.IntN(1<<24), r.IntN(2))
	if r.IntN(2) == 0 {
		b.WriteByte(0)
	}
	return b.String()
}

// tpcTime formats ms as XrdXrootdTpcMon does (µs with at least 3 digits).
func tpcTime(ms int64) string {
	t := time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05")
	us := (ms % 1000) * 1000
	if us == 0 {
		return t + ".000Z"
	}
	return t + "." + strconv.FormatInt(us, 10) + "Z"
}

// genTPCLine returns a provider P line as XrdXrootdTpcMon writes it.
func genTPCLine(r *rand.Rand, path string) string {
	beg := 1772366400000 + r.Int64N(1e9)
	end := beg + r.Int64N(1e6)
	kind, proto, ipv := "pull", "xroot", 4
	if r.IntN(2) == 0 {
		kind = "push"
	}
	if r.IntN(2) == 0 {
		proto = "http"
	}
	if r.IntN(2) == 0 {
		ipv = 6
	}
	begS, endS := tpcTime(beg), tpcTime(end)
	if r.IntN(4) == 0 {
		begS = time.UnixMilli(beg).UTC().Format("2006-01-02T15:04:05") + fmt.Sprintf(".%06dZ", r.IntN(1e6))
	}
	return fmt.Sprintf(`{"TPC":"%s","Client":"user%d.%d:%d@wn%03d.example.edu","Xeq":{"Beg":"%s","End":"%s","RC":%d,"Strm":%d,"Type":"%s","IPv":%d},`+
		`"Src":"xroot://origin.example.org:1094/%s","Dst":"xroot://cache%d.example.org:1094/%s","Size":%d}`,
		proto, r.IntN(100), r.IntN(1e5), r.IntN(1024), r.IntN(500), begS, endS, r.IntN(2)*3010, 1+r.IntN(8),
		kind, ipv, path, r.IntN(10), path, r.Int64N(1<<36))
}

// genThrottleLine returns a provider R throttle_update line.
func genThrottleLine(r *rand.Rand) string {
	return fmt.Sprintf(`{"event":"throttle_update","io_wait":%.*f,"io_active":%d,"io_total":%d}`+"\n",
		r.IntN(7), r.Float64()*1e5, r.IntN(100), r.Int64N(1e12))
}

var ossCounters = []string{"reads", "writes", "stats", "pgreads", "pgwrites", "readvs", "readv_segs", "dirlists",
	"dirlist_ents", "truncates", "unlinks", "chmods", "opens", "renames"}
var ossTimes = []string{"open", "read", "readv", "pgread", "write", "pgwrite", "dirlist", "stat", "truncate",
	"unlink", "rename", "chmod"}

// genOSSLine returns a provider O oss_stats line.
func genOSSLine(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString(`{"event":"oss_stats"`)
	for _, c := range ossCounters {
		fmt.Fprintf(&b, `,"%s":%d`, c, r.Int64N(1e9))
	}
	for _, c := range ossCounters {
		fmt.Fprintf(&b, `,"slow_%s":%d`, c, r.Int64N(1e3))
	}
	for _, c := range ossTimes {
		fmt.Fprintf(&b, `,"%s_t":%.4f`, c, r.Float64()*1e6)
	}
	for _, c := range ossTimes {
		fmt.Fprintf(&b, `,"slow_%s_t":%.4f`, c, r.Float64()*1e3)
	}
	b.WriteString("}")
	return b.String()
}

// genHTTPLine returns a provider H line of HTTP_<VERB>_<STATUS> counters.
func genHTTPLine(r *rand.Rand) string {
	verbs := []string{"GET", "PUT", "HEAD", "PROPFIND", "DELETE", "COPY"}
	codes := []int{200, 201, 206, 403, 404, 500}
	var b strings.Builder
	b.WriteByte('{')
	for i := range 1 + r.IntN(6) {
		if i > 0 {
			b.WriteByte(',')
		}
		n := r.Int64N(1e6)
		fmt.Fprintf(&b, `"HTTP_%s_%d":{"count":%d,"errors_network":%d,"errors_xrootd":%d,"success":%d,"duration_seconds":%.3f}`,
			verbs[r.IntN(len(verbs))], codes[r.IntN(len(codes))], n, r.IntN(10), r.IntN(10), n, r.Float64()*1e4)
	}
	b.WriteByte('}')
	return b.String()
}

// genGenericLine returns a plugin-defined (T, M) line.
func genGenericLine(r *rand.Rand) string {
	return fmt.Sprintf(` {"z":%d, "a":{"rtt":%d,"s":"<x%d>","f":%g,"l":[1,2.50,-3e2,true,null]},"m":"é"}`,
		r.IntN(100), r.Uint64(), r.IntN(10), r.Float64())
}

// sampleLine returns a well-formed line for the provider.
func sampleLine(r *rand.Rand, provider byte) string {
	path := corpusPaths[0]
	if r.IntN(4) == 0 {
		path = corpusPaths[r.IntN(len(corpusPaths))]
	}
	switch provider {
	case 'C':
		return genCacheLine(r, path)
	case 'P':
		return genTPCLine(r, path)
	case 'R':
		return genThrottleLine(r)
	case 'O':
		return genOSSLine(r)
	case 'H':
		return genHTTPLine(r)
	}
	return genGenericLine(r)
}

// corpusProviders are the providers the corpus covers.
const corpusProviders = "CPROHTMZ"

// mutateInserts are fragments spliced into lines by mutate.
var mutateInserts = []string{
	`\`, `"`, `\"`, `\\`, `\n`, `\u00e9`, `\ud800`, `\udc00x`, `\uD83D\uDE00`, "\xff", "\xe2\x80\xa8", "é", "<>&",
	" ", "\t", "\n", "\x00", "\x01", ",", ":", "{", "}", "[", "]", "null", "true", "-", "0", "-0", "1.5", "1e3",
	"1E-7", "00", "18446744073709551616", "9223372036854775808", "-9223372036854775809", "1e400",
	`"size":null,`, `"lfn":"x",`, `"LFN":"/upper",`, `"Size":7,`, `"event":"purge",`, `"remotes":null,`,
	`"remotes":["a","b"],`, `"io_wait":1e-9,`, `"io_wait":123456789012345678901234,`, `"reads":-1,`,
	`"Xeq":{},`, `"Xeq":null,`, `"x":{"y":[1,{"z":"w"}]},`, `"HTTP_X_1":null,`, `"HTTP_X_1":{"count":1.0},`,
	`"Beg":"2026-03-01T12:00:00Z",`, `"End":"2026-13-01T12:00:00.000Z",`, `"RC":"0",`, `"Strm":-1,`,
	`"event":"file_close",`, `"event":"FILE_CLOSE",`, `"b_hit":1.0,`, `"size":1e3,`, `"Type":"pu\u006cl",`,
	`"Client":"a\"b",`, `"Src":"x\\y",`,
}

// mutate returns line with a few random edits.
func mutate(r *rand.Rand, line string) string {
	b := []byte(line)
	for range 1 + r.IntN(3) {
		if len(b) == 0 {
			b = append(b, mutateInserts[r.IntN(len(mutateInserts))]...)
			continue
		}
		i := r.IntN(len(b) + 1)
		switch r.IntN(8) {
		case 0: // delete a span
			j := min(len(b), i+1+r.IntN(8))
			b = append(b[:i:i], b[j:]...)
		case 1: // flip a byte
			if i < len(b) {
				b[i] ^= byte(1 << r.IntN(8))
			}
		case 2: // truncate
			b = b[:i]
		case 3: // swap case of a letter
			if i < len(b) && (b[i]|0x20) >= 'a' && (b[i]|0x20) <= 'z' {
				b[i] ^= 0x20
			}
		case 4: // insert after an opening brace or a comma
			k := strings.IndexAny(string(b[i:]), "{,")
			if k < 0 {
				k = 0
			}
			k += i + 1
			if k > len(b) {
				k = len(b)
			}
			ins := mutateInserts[r.IntN(len(mutateInserts))]
			b = append(b[:k:k], append([]byte(ins), b[k:]...)...)
		case 5: // replace a digit
			if i < len(b) && b[i] >= '0' && b[i] <= '9' {
				b[i] = "0123456789.eE-+"[r.IntN(15)]
			}
		default: // insert anywhere
			ins := mutateInserts[r.IntN(len(mutateInserts))]
			b = append(b[:i:i], append([]byte(ins), b[i:]...)...)
		}
	}
	return string(b)
}

// corpusInput is one ParseEvent input.
type corpusInput struct {
	provider byte
	line     string
}

// diffCorpus returns n inputs: well-formed lines and mutations of them for
// every provider, from a fixed seed.
func diffCorpus(n int) []corpusInput {
	r := rand.New(rand.NewPCG(1, 2))
	in := make([]corpusInput, 0, n)
	for len(in) < n {
		p := corpusProviders[r.IntN(len(corpusProviders))]
		line := sampleLine(r, p)
		if r.IntN(3) != 0 {
			line = mutate(r, line)
		}
		in = append(in, corpusInput{p, line})
	}
	return in
}
