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
var outputKinds = []struct {
	name    string
	enabled func(*config.Outputs) bool
	build   func(*config.Outputs, *store.Store, *slog.Logger, prometheus.Registerer) (func(context.Context) error, error)
}{
	{"amqp", func(o *config.Outputs) bool { return o.AMQP.Enabled },
		func(o *config.Outputs, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (func(context.Context) error, error) {
			s, err := amqpsink.New(o.AMQP, st, log, reg)
			return runOf(s, err)
		}},
	{"stomp", func(o *config.Outputs) bool { return o.STOMP.Enabled },
		func(o *config.Outputs, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (func(context.Context) error, error) {
			s, err := stompsink.New(o.STOMP, st, log, reg)
			return runOf(s, err)
		}},
	{"postgres", func(o *config.Outputs) bool { return o.Postgres.Enabled },
		func(o *config.Outputs, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (func(context.Context) error, error) {
			s, err := postgres.New(o.Postgres, st, log, reg)
			return runOf(s, err)
		}},
	{"jsonl", func(o *config.Outputs) bool { return o.JSONL.Enabled },
		func(o *config.Outputs, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (func(context.Context) error, error) {
			s, err := jsonl.New(o.JSONL, st, log, reg)
			return runOf(s, err)
		}},
}

// runOf returns the Run method of a sink just built.
func runOf[S interface{ Run(context.Context) error }](s S, err error) (func(context.Context) error, error) {
	if err != nil {
		return nil, err
	}
	return s.Run, nil
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

// outputNames lists the outputs that deliver records elsewhere (the
// rollups are the collector's own), for the startup log: "none" when the
// store is the only destination.
func outputNames(outs []output) string {
	var names []string
	for _, o := range outs {
		if o.name != "rollup" {
			names = append(names, o.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}
