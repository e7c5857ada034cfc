package loadgen

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Scenario is a series of runs that vary one knob of a base Config, for
// benchmarks such as `xrdmon bench`: more clients per server, a rate ramp,
// many servers, long transfers.
type Scenario struct {
	Name   string
	Base   Config
	Param  string    // the knob varied: see ScenarioParams
	Values []float64 // its value in each step
}

// Step is one run of a scenario.
type Step struct {
	Name   string // "clients=50"
	Value  float64
	Config Config
}

// ScenarioParams lists the knobs a scenario can vary and how a value sets
// them (durations are in seconds).
var ScenarioParams = map[string]func(*Config, float64){
	"clients":  func(c *Config, v float64) { c.Clients = int(v) },
	"servers":  func(c *Config, v float64) { c.Servers = int(v) },
	"rate":     func(c *Config, v float64) { c.Rate = v },
	"duration": func(c *Config, v float64) { c.Duration = seconds(v) },
	"count":    func(c *Config, v float64) { c.Count = int64(v) },
	"fbsz":     func(c *Config, v float64) { c.FBSZ = int(v) },
	"loss":     func(c *Config, v float64) { c.Loss = v },
	"reorder":  func(c *Config, v float64) { c.Reorder = v },
	"restarts": func(c *Config, v float64) { c.Restarts = int(v) },
	// xfr: an isXfr every v fstat intervals (the snapshots' cadence).
	"xfr": func(c *Config, v float64) { c.XfrEvery = int(v) },
	// transfer: every access lasts v seconds (long transfers, many isXfr).
	"transfer": func(c *Config, v float64) {
		c.TransferMin, c.TransferMax, c.LongFrac = seconds(v), seconds(v), 0
	},
}

func seconds(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }

// ScenarioPresets are the named scenarios ParseScenario knows.
var ScenarioPresets = map[string]string{
	"clients":        "clients=50..400 step 50",
	"rate-ramp":      "rate=10000..300000 step 10000",
	"many-servers":   "servers=10..10000 x10",
	"long-transfers": "transfer=600..7200 x2",
}

// ParseScenario parses a scenario spec on top of base. A spec is a preset
// name (ScenarioPresets) or `param=values` where values is one of
// `a..b step s` (arithmetic), `a..b xf` (geometric, factor f; b is always
// included) or `v1,v2,...`.
func ParseScenario(spec string, base Config) (Scenario, error) {
	name := strings.TrimSpace(spec)
	if p, ok := ScenarioPresets[name]; ok {
		spec = p
	}
	param, vals, ok := strings.Cut(spec, "=")
	param = strings.TrimSpace(param)
	if !ok {
		return Scenario{}, fmt.Errorf("scenario %q: want param=values or a preset", spec)
	}
	if _, ok := ScenarioParams[param]; !ok {
		return Scenario{}, fmt.Errorf("scenario %q: unknown parameter %q", spec, param)
	}
	values, err := parseValues(strings.TrimSpace(vals))
	if err != nil {
		return Scenario{}, fmt.Errorf("scenario %q: %w", spec, err)
	}
	return Scenario{Name: name, Base: base, Param: param, Values: values}, nil
}

func parseValues(s string) ([]float64, error) {
	if lo, rest, ok := strings.Cut(s, ".."); ok {
		hiStr, stepStr, _ := strings.Cut(strings.TrimSpace(rest), " ")
		a, err1 := strconv.ParseFloat(strings.TrimSpace(lo), 64)
		b, err2 := strconv.ParseFloat(strings.TrimSpace(hiStr), 64)
		if err1 != nil || err2 != nil || b < a {
			return nil, fmt.Errorf("range %q: want a..b with a <= b", s)
		}
		stepStr = strings.TrimSpace(stepStr)
		var out []float64
		switch {
		case strings.HasPrefix(stepStr, "step"):
			st, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(stepStr, "step")), 64)
			if err != nil || st <= 0 {
				return nil, fmt.Errorf("step in %q: want a positive number", s)
			}
			for i := 0; ; i++ {
				v := a + float64(i)*st
				if v > b+st*1e-9 {
					break
				}
				out = append(out, v)
			}
		case strings.HasPrefix(stepStr, "x"):
			f, err := strconv.ParseFloat(strings.TrimPrefix(stepStr, "x"), 64)
			if err != nil || f <= 1 || a <= 0 {
				return nil, fmt.Errorf("factor in %q: want x<f> with f > 1 and a > 0", s)
			}
			for v := a; v < b; v *= f {
				out = append(out, math.Round(v*1e6)/1e6)
			}
			out = append(out, b)
		case stepStr == "":
			out = []float64{a, b}
		default:
			return nil, fmt.Errorf("range %q: want `step s` or `x<f>` after the bounds", s)
		}
		if len(out) > 10000 {
			return nil, fmt.Errorf("range %q: more than 10000 steps", s)
		}
		return out, nil
	}
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, fmt.Errorf("value %q: %w", f, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// Steps returns the configuration of every step, each validated.
func (s Scenario) Steps() ([]Step, error) {
	set, ok := ScenarioParams[s.Param]
	if !ok {
		return nil, fmt.Errorf("scenario %q: unknown parameter %q", s.Name, s.Param)
	}
	steps := make([]Step, 0, len(s.Values))
	for _, v := range s.Values {
		c := s.Base
		set(&c, v)
		st := Step{Name: s.Param + "=" + strconv.FormatFloat(v, 'f', -1, 64), Value: v, Config: c}
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("scenario step %s: %w", st.Name, err)
		}
		steps = append(steps, st)
	}
	return steps, nil
}

// PresetNames returns the preset scenario names, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(ScenarioPresets))
	for n := range ScenarioPresets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
