package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/config"
	amqpsink "github.com/xrdmon/xrdmon/internal/sink/amqp"
	"github.com/xrdmon/xrdmon/internal/sink/jsonl"
	"github.com/xrdmon/xrdmon/internal/sink/postgres"
	stompsink "github.com/xrdmon/xrdmon/internal/sink/stomp"
	"github.com/xrdmon/xrdmon/internal/store"
)

// outputKinds lists the sinks: each builds from its own configuration
// section and reads the store's log from its own cursor, so it can stop,
// fall behind or fail without losing data.
var outputKinds = []outputKind{
	sinkKind("amqp", func(o *config.Outputs) (amqpsink.Config, bool) { return o.AMQP, o.AMQP.Enabled }, amqpsink.New),
	sinkKind("stomp", func(o *config.Outputs) (stompsink.Config, bool) { return o.STOMP, o.STOMP.Enabled }, stompsink.New),
	sinkKind("postgres", func(o *config.Outputs) (postgres.Config, bool) { return o.Postgres, o.Postgres.Enabled }, postgres.New),
	sinkKind("jsonl", func(o *config.Outputs) (jsonl.Config, bool) { return o.JSONL, o.JSONL.Enabled }, jsonl.New),
}

// outputKind is a sink: whether the configuration enables it, and how to
// build it (returning its Run method).
type outputKind struct {
	name    string
	enabled func(*config.Outputs) bool
	build   func(*config.Outputs, *store.Store, *slog.Logger, prometheus.Registerer) (func(context.Context) error, error)
}

// sinkKind is the outputKind of a sink that newSink builds from its
// configuration section, which section returns with its enabled flag.
func sinkKind[C any, S interface{ Run(context.Context) error }](name string, section func(*config.Outputs) (C, bool),
	newSink func(C, *store.Store, *slog.Logger, prometheus.Registerer) (S, error)) outputKind {
	return outputKind{
		name: name,
		enabled: func(o *config.Outputs) bool {
			_, on := section(o)
			return on
		},
		build: func(o *config.Outputs, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (func(context.Context) error, error) {
			cfg, _ := section(o)
			s, err := newSink(cfg, st, log, reg)
			if err != nil {
				return nil, err
			}
			return s.Run, nil
		},
	}
}

// newOutputs builds the configured sinks.
func newOutputs(cfg *config.Config, st *store.Store, log *slog.Logger, reg prometheus.Registerer) ([]output, error) {
	var outs []output
	for _, k := range outputKinds {
		if !k.enabled(&cfg.Outputs) {
			continue
		}
		run, err := k.build(&cfg.Outputs, st, log.With("component", k.name+"_output"), reg)
		if err != nil {
			return nil, fmt.Errorf("%s output: %w", k.name, err)
		}
		outs = append(outs, output{k.name, run})
	}
	return outs, nil
}

// outputNames lists the outputs, for the startup log: "none" when the
// store is the only destination.
func outputNames(outs []output) string {
	var names []string
	for _, o := range outs {
		names = append(names, o.name)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}
