package bench

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
)

// Stage is a part of the collector that a CPU profile's samples are
// summed by (Stages).
type Stage struct {
	Name    string
	Seconds float64
	Share   float64 // of the profile's CPU time
}

// ownerRules name the stage of a stack that has, anywhere, a frame whose
// function starts with one of a rule's prefixes: the rollups (fed in the
// writer's goroutine by the store's append listener, and reading the
// store when behind), the sinks (reading the store) and the API own what
// they call. stageRules name the stage of the other stacks: the first
// frame, from the leaf up, that matches. A stack with none is "runtime
// (GC, scheduler)" when a frame is the runtime's, else "other".
var ownerRules = []rule{
	{"rollups", []string{"github.com/xrdmon/xrdmon/internal/rollup."}},
	{"sinks", []string{"github.com/xrdmon/xrdmon/internal/sink/"}},
	{"api, web, metrics", []string{"github.com/xrdmon/xrdmon/internal/api.", "github.com/xrdmon/xrdmon/internal/web.", "net/http.",
		"github.com/prometheus/"}},
}

var stageRules = []rule{
	{"store", []string{"github.com/xrdmon/xrdmon/internal/store.", "github.com/mattn/go-sqlite3."}},
	{"dns", []string{"github.com/xrdmon/xrdmon/internal/dnscache."}},
	{"shards (decode, correlate)", []string{"github.com/xrdmon/xrdmon/internal/correlate.", "github.com/xrdmon/xrdmon/internal/packet.",
		"github.com/xrdmon/xrdmon/internal/pipeline.(*shard)"}},
	{"source", []string{"github.com/xrdmon/xrdmon/internal/source/"}},
	{"writer (link, name, commit)", []string{"github.com/xrdmon/xrdmon/internal/pipeline.", "github.com/xrdmon/xrdmon/internal/record."}},
}

// rule names a stage by the prefixes of its functions.
type rule struct {
	stage    string
	prefixes []string
}

func (r rule) match(fn string) bool {
	for _, p := range r.prefixes {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// Stages sums the CPU samples of a profile by stage of the collector
// (source, shards, writer, store, rollups, sinks...), largest first, so
// that a regression points at its stage.
func Stages(r io.Reader) ([]Stage, error) {
	p, err := profile.Parse(r)
	if err != nil {
		return nil, fmt.Errorf("read profile: %w", err)
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("not a CPU profile")
	}
	sums := make(map[string]int64)
	var total int64
	for _, s := range p.Sample {
		v := s.Value[idx]
		sums[stageOf(s)] += v
		total += v
	}
	out := make([]Stage, 0, len(sums))
	for name, v := range sums {
		st := Stage{Name: name, Seconds: float64(v) / 1e9}
		if total > 0 {
			st.Share = float64(v) / float64(total)
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b Stage) int { return cmp.Or(cmp.Compare(b.Seconds, a.Seconds), cmp.Compare(a.Name, b.Name)) })
	return out, nil
}

// StagesOfFile is Stages of the profile at path.
func StagesOfFile(path string) ([]Stage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Stages(f)
}

func stageOf(s *profile.Sample) string {
	var names []string // leaf first
	for _, loc := range s.Location {
		for _, ln := range loc.Line {
			if ln.Function != nil {
				names = append(names, ln.Function.Name)
			}
		}
	}
	for _, r := range ownerRules {
		if slices.ContainsFunc(names, r.match) {
			return r.stage
		}
	}
	for _, name := range names {
		for _, r := range stageRules {
			if r.match(name) {
				return r.stage
			}
		}
	}
	if slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "runtime.") }) {
		return "runtime (GC, scheduler)"
	}
	return "other"
}

// FormatStages writes stages as one line: "shards 41% (6.2 s), ...".
func FormatStages(stages []Stage) string {
	parts := make([]string, len(stages))
	for i, st := range stages {
		parts[i] = fmt.Sprintf("%s %.0f%% (%.1f s)", st.Name, 100*st.Share, st.Seconds)
	}
	return strings.Join(parts, ", ")
}
