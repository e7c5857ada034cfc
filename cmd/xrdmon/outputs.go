package main

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/config"
	amqpsink "github.com/xrdmon/xrdmon/internal/sink/amqp"
	"github.com/xrdmon/xrdmon/internal/sink/jsonl"
	"github.com/xrdmon/xrdmon/internal/sink/postgres"
	"github.com/xrdmon/xrdmon/internal/store"
)

// newOutputs builds the configured sinks. Each reads the store's log from
// its own cursor, so it can stop, fall behind or fail without losing data.
func newOutputs(cfg *config.Config, st *store.Store, log *slog.Logger, reg prometheus.Registerer) ([]output, error) {
	var outs []output
	if cfg.Outputs.AMQP.Enabled {
		s, err := amqpsink.New(cfg.Outputs.AMQP, st, log.With("component", "amqp_output"), reg)
		if err != nil {
			return nil, fmt.Errorf("amqp output: %w", err)
		}
		outs = append(outs, output{"amqp", s.Run})
	}
	if cfg.Outputs.Postgres.Enabled {
		s, err := postgres.New(cfg.Outputs.Postgres, st, log.With("component", "postgres_output"), reg)
		if err != nil {
			return nil, fmt.Errorf("postgres output: %w", err)
		}
		outs = append(outs, output{"postgres", s.Run})
	}
	if cfg.Outputs.JSONL.Enabled {
		s, err := jsonl.New(cfg.Outputs.JSONL.Path, st, log.With("component", "jsonl_output"), reg)
		if err != nil {
			return nil, fmt.Errorf("jsonl output: %w", err)
		}
		outs = append(outs, output{"jsonl", s.Run})
	}
	return outs, nil
}
