// Package loadgen simulates XRootD servers and their clients, producing the
// monitoring packets real servers send (map records, f-stream, g-stream) and
// the ground truth a correlator should derive from them.
//
// The simulation runs on a virtual clock that starts at a fixed epoch, so the
// same Config (seed included) always produces byte-identical packets. Outputs
// (UDP, RabbitMQ shoveler messages, capture files) receive the packets in
// batches; UDP and RabbitMQ can be paced in real time at Config.Rate.
package loadgen

import (
	"errors"
	"fmt"
	"time"
)

// Config holds every knob of a run. Start from DefaultConfig.
type Config struct {
	// Servers is the number of simulated XRootD servers; Clients the number
	// of concurrent client slots per server. A slot runs sessions back to
	// back: login, a few file accesses, disconnect, a pause.
	Servers int `json:"servers"`
	Clients int `json:"clients"`

	// Rate paces delivery in real time at this many packets/s (0: as fast
	// as possible). It does not change the simulated clock.
	Rate float64 `json:"rate"`
	// Duration is the simulated time the run covers.
	Duration time.Duration `json:"duration"`
	// Count stops the run after this many generated packets (0: no limit).
	// The run then ends abruptly: buffered f-stream records are never sent
	// and the files still open are expected as end_of_input partials.
	Count int64 `json:"count"`
	// Seed makes the run deterministic.
	Seed uint64 `json:"seed"`
	// Epoch is the start of simulated time; zero derives it from Seed.
	Epoch time.Time `json:"epoch"`
	// Drain, at the end of Duration, closes every open file and ends every
	// session, so every expected record is complete. Without it the files
	// still open at the end are expected as end_of_input partials.
	Drain bool `json:"drain"`

	// The access mix. WriteFrac of accesses write a new file; of the rest,
	// ReadvFrac also use vector reads. File sizes are log-uniform in
	// [FileSizeMin, FileSizeMax]; transfers last a uniform time in
	// [TransferMin, TransferMax], except LongFrac of them which last
	// LongTransfer (and get periodic isXfr updates).
	WriteFrac    float64       `json:"write_frac"`
	ReadvFrac    float64       `json:"readv_frac"`
	FileSizeMin  int64         `json:"file_size_min"`
	FileSizeMax  int64         `json:"file_size_max"`
	TransferMin  time.Duration `json:"transfer_min"`
	TransferMax  time.Duration `json:"transfer_max"`
	LongFrac     float64       `json:"long_frac"`
	LongTransfer time.Duration `json:"long_transfer"`
	// FilesPerSession is the most files a session opens (uniform 1..N).
	FilesPerSession int `json:"files_per_session"`
	// ThinkTime is the mean pause between a session's end and the slot's
	// next login.
	ThinkTime time.Duration `json:"think_time"`
	// ForcedFrac of sessions disconnect with a file open: the server then
	// closes it with the forced flag.
	ForcedFrac float64 `json:"forced_frac"`
	// TokenFrac of sessions log in with a token (ztn, plus a T record);
	// the rest use gsi. IPv6Frac connect over IPv6. InfoFrac send an i
	// record (application info); UEACFrac a U record (SciTags).
	TokenFrac float64 `json:"token_frac"`
	IPv6Frac  float64 `json:"ipv6_frac"`
	InfoFrac  float64 `json:"info_frac"`
	UEACFrac  float64 `json:"ueac_frac"`
	// CacheFrac of servers are XCaches: every read access also emits a C
	// file_close g-stream event. TPCFrac of accesses are third-party
	// copies and emit a P g-stream event.
	CacheFrac float64 `json:"cache_frac"`
	TPCFrac   float64 `json:"tpc_frac"`
	// Trace makes the servers trace I/O on the t-stream: "io" (a summary
	// entry per vector read) or "iov" (vector reads unwound into their
	// segments); "" sends no t-stream. A file's trace is sent when it is
	// closed, before the f-stream close.
	Trace string `json:"trace"`
	// Redirectors adds redirectors (up to 4) in front of the servers: every
	// client logs in at each, and each open follows a chain of 1 to
	// Redirectors redirects (r-stream), the k-th hop at redirector k, each
	// hop taking RedirectDelay on average (uniform in [0.5, 1.5] of it).
	Redirectors   int           `json:"redirectors"`
	RedirectDelay time.Duration `json:"redirect_delay"`
	// RedirectWindow, when positive, makes each redirector buffer its
	// r-stream and send it every RedirectWindow (XRootD's monitor window
	// and rbuff), one timing mark covering the window: the redirects then
	// reach the collector up to a window late, often after the record of
	// a short transfer. 0 sends each redirect at once.
	RedirectWindow time.Duration `json:"redirect_window"`
	// Users and Paths size the pools of distinct user names and read paths.
	Users int `json:"users"`
	Paths int `json:"paths"`

	// Server behaviour. FBSZ is the f-stream buffer size (monitor fbsz,
	// real default 65472); a buffer is sent when full or every FStat of
	// simulated time. Open files with I/O get an isXfr every XfrEvery
	// FStat intervals. The '=' ident record is sent at start and every
	// IdentInterval. g-stream buffers hold GBuff bytes and are flushed when
	// full or GFlush after their first record.
	FBSZ          int           `json:"fbsz"`
	FStat         time.Duration `json:"fstat"`
	XfrEvery      int           `json:"xfr_every"`
	IdentInterval time.Duration `json:"ident_interval"`
	// SummaryInterval, when set, makes each data server send an
	// xrd.report summary (XML) this often: link.in and link.out, the
	// bytes written and read by its transfers closed so far, xrootd.ops.open
	// the files opened, link.num the files open; from zero again after a
	// restart. ServerTruth.Summary gives the increases a collector must
	// find.
	SummaryInterval time.Duration `json:"summary_interval,omitempty"`
	GBuff           int           `json:"gbuff"`
	GFlush          time.Duration `json:"gflush"`

	// Impairments, applied to generated packets on their way to the output:
	// Loss drops, Duplicate sends twice, Reorder swaps a packet with the
	// server's next one (each a probability per packet). Restarts is the
	// number of server restarts (new stod) spread over the run.
	Loss      float64 `json:"loss"`
	Duplicate float64 `json:"duplicate"`
	Reorder   float64 `json:"reorder"`
	Restarts  int     `json:"restarts"`

	// KeepRecords keeps every expected record in the Truth; turn it off for
	// very long runs (totals are kept either way).
	KeepRecords bool `json:"keep_records"`
}

// DefaultConfig returns a small, realistic run: 4 servers with 16 clients
// each for 10 simulated minutes.
func DefaultConfig() Config {
	return Config{
		Servers:         4,
		Clients:         16,
		Duration:        10 * time.Minute,
		Seed:            1,
		Drain:           true,
		WriteFrac:       0.1,
		ReadvFrac:       0.3,
		FileSizeMin:     1 << 20,
		FileSizeMax:     4 << 30,
		TransferMin:     time.Second,
		TransferMax:     2 * time.Minute,
		LongFrac:        0.05,
		LongTransfer:    20 * time.Minute,
		FilesPerSession: 4,
		ThinkTime:       5 * time.Second,
		ForcedFrac:      0.02,
		TokenFrac:       0.3,
		IPv6Frac:        0.2,
		InfoFrac:        0.5,
		UEACFrac:        0.3,
		CacheFrac:       0.25,
		TPCFrac:         0.05,
		Users:           200,
		Paths:           4096,
		FBSZ:            65472,
		FStat:           10 * time.Second,
		XfrEvery:        3,
		IdentInterval:   5 * time.Minute,
		GBuff:           32768,
		GFlush:          time.Minute,
		RedirectDelay:   250 * time.Millisecond,
		KeepRecords:     true,
	}
}

// Validate reports every problem with the configuration at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Servers < 1 || c.Servers > 1<<20 {
		bad("servers %d: want 1..%d", c.Servers, 1<<20)
	}
	if c.Clients < 1 {
		bad("clients %d: want at least 1", c.Clients)
	}
	if c.Rate < 0 {
		bad("rate %g: negative", c.Rate)
	}
	if c.Duration <= 0 && c.Count <= 0 {
		bad("duration %s: need a positive duration or count", c.Duration)
	}
	if c.Count < 0 {
		bad("count %d: negative", c.Count)
	}
	for name, p := range map[string]float64{
		"write_frac": c.WriteFrac, "readv_frac": c.ReadvFrac, "long_frac": c.LongFrac,
		"forced_frac": c.ForcedFrac, "token_frac": c.TokenFrac, "ipv6_frac": c.IPv6Frac,
		"info_frac": c.InfoFrac, "ueac_frac": c.UEACFrac, "cache_frac": c.CacheFrac,
		"tpc_frac": c.TPCFrac, "loss": c.Loss, "duplicate": c.Duplicate, "reorder": c.Reorder,
	} {
		if p < 0 || p > 1 {
			bad("%s %g: want a probability in [0, 1]", name, p)
		}
	}
	if c.FileSizeMin < 1 || c.FileSizeMax < c.FileSizeMin {
		bad("file sizes %d..%d: want 1 <= min <= max", c.FileSizeMin, c.FileSizeMax)
	}
	if c.TransferMin < time.Millisecond || c.TransferMax < c.TransferMin {
		bad("transfer times %s..%s: want 1ms <= min <= max", c.TransferMin, c.TransferMax)
	}
	if c.LongFrac > 0 && c.LongTransfer < time.Millisecond {
		bad("long_transfer %s: want at least 1ms", c.LongTransfer)
	}
	if c.Trace != "" && c.Trace != "io" && c.Trace != "iov" {
		bad("trace %q: want \"\", \"io\" or \"iov\"", c.Trace)
	}
	if c.Redirectors < 0 || c.Redirectors > maxRedirectors {
		bad("redirectors %d: want 0..%d", c.Redirectors, maxRedirectors)
	}
	if c.RedirectWindow < 0 {
		bad("redirect_window %s: negative", c.RedirectWindow)
	}
	if c.Redirectors > 0 && c.RedirectDelay < 0 {
		bad("redirect_delay %s: negative", c.RedirectDelay)
	}
	if c.FilesPerSession < 1 {
		bad("files_per_session %d: want at least 1", c.FilesPerSession)
	}
	if c.ThinkTime < 0 {
		bad("think_time %s: negative", c.ThinkTime)
	}
	if c.Users < 1 || c.Paths < 1 {
		bad("users %d, paths %d: want at least 1 each", c.Users, c.Paths)
	}
	// An isOpen with the longest generated path, plus header and isTime.
	if c.FBSZ < 512 || c.FBSZ > 65535 {
		bad("fbsz %d: want 512..65535", c.FBSZ)
	}
	if c.FStat < time.Second {
		bad("fstat %s: want at least 1s", c.FStat)
	}
	if c.XfrEvery < 1 {
		bad("xfr_every %d: want at least 1", c.XfrEvery)
	}
	if c.SummaryInterval != 0 && c.SummaryInterval < time.Second {
		bad("summary_interval %s: want 0 (none) or at least 1s", c.SummaryInterval)
	}
	if c.IdentInterval < time.Second {
		bad("ident_interval %s: want at least 1s", c.IdentInterval)
	}
	if c.GBuff < 1024 || c.GBuff > 65536 {
		bad("gbuff %d: want 1024..65536", c.GBuff)
	}
	if c.GFlush < time.Second {
		bad("gflush %s: want at least 1s", c.GFlush)
	}
	if c.Restarts < 0 {
		bad("restarts %d: negative", c.Restarts)
	}
	if c.Restarts > 0 && c.Duration <= 0 {
		bad("restarts need a duration to spread them over")
	}
	return errors.Join(errs...)
}

// epoch returns the start of simulated time.
func (c *Config) epoch() time.Time {
	if !c.Epoch.IsZero() {
		return c.Epoch.UTC().Truncate(time.Second)
	}
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(c.Seed%8760) * time.Hour)
}

// Lossless reports whether the configuration injects no impairment, so
// that a correlator must reproduce the truth exactly.
func (c *Config) Lossless() bool {
	return c.Loss == 0 && c.Duplicate == 0 && c.Reorder == 0
}
