// Package config defines the configuration of the xrdmon collect daemon and
// loads it from defaults, a YAML file, XRDMON_* environment variables and
// --section.key flags, in increasing order of precedence.
//
// Every leaf key has three spellings, derived from the yaml tags:
//
//	YAML     listen: {rcvbuf: 64MiB}
//	env      XRDMON_LISTEN_RCVBUF=64MiB
//	flag     --listen.rcvbuf=64MiB
//
// Lists are comma separated in env and flags ("10.0.0.0/8,192.168.0.0/16"),
// maps are comma separated key=value pairs ("192.168.0.5=172.0.0.5").
package config

import (
	"github.com/xrdmon/xrdmon/internal/cluster"
	amqpsink "github.com/xrdmon/xrdmon/internal/sink/amqp"
	stompsink "github.com/xrdmon/xrdmon/internal/sink/stomp"
	amqpsrc "github.com/xrdmon/xrdmon/internal/source/amqp"
	stompsrc "github.com/xrdmon/xrdmon/internal/source/stomp"

	"github.com/xrdmon/xrdmon/internal/dnscache"
	"github.com/xrdmon/xrdmon/internal/pipeline"
	"github.com/xrdmon/xrdmon/internal/rollup"
	"github.com/xrdmon/xrdmon/internal/sink/jsonl"
	"github.com/xrdmon/xrdmon/internal/sink/postgres"
	"github.com/xrdmon/xrdmon/internal/source/file"
	"github.com/xrdmon/xrdmon/internal/source/udp"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/web"
)

// Config is the whole configuration of "xrdmon collect": one section per
// component, each section the component's own Config type with its own
// defaults. The zero value is not useful; start from Default or Load.
type Config struct {
	Listen     udp.Config      `yaml:"listen"`
	AMQPInput  amqpsrc.Config  `yaml:"amqp_input"`
	STOMPInput stompsrc.Config `yaml:"stomp_input"`
	FileInput  file.Config     `yaml:"file_input"`
	HTTP       web.Config      `yaml:"http"`
	Store      store.Config    `yaml:"store"`
	DNS        dnscache.Config `yaml:"dns"`
	Correlate  pipeline.Config `yaml:"correlate"`
	Rollup     rollup.Config   `yaml:"rollup"`
	Outputs    Outputs         `yaml:"outputs"`
	Cluster    cluster.Config  `yaml:"cluster"`
	Log        Log             `yaml:"log"`
}

// Outputs configures the sinks. Each reads the store's log from its own
// cursor.
type Outputs struct {
	AMQP     amqpsink.Config  `yaml:"amqp"`
	STOMP    stompsink.Config `yaml:"stomp"`
	Postgres postgres.Config  `yaml:"postgres"`
	JSONL    jsonl.Config     `yaml:"jsonl"`
}

// Log configures the daemon's own log.
type Log struct {
	Level  string `yaml:"level" help:"debug, info, warn or error"`
	Format string `yaml:"format" help:"text or json"`
}

// Default returns the default configuration, every section its
// component's DefaultConfig. It is valid as is: a daemon receiving UDP on
// :9930, storing into ./xrdmon-data and serving HTTP on 127.0.0.1:9939,
// with no outputs besides the store.
func Default() *Config {
	return &Config{
		Listen:     udp.DefaultConfig(),
		AMQPInput:  amqpsrc.DefaultConfig(),
		STOMPInput: stompsrc.DefaultConfig(),
		HTTP:       web.DefaultConfig(),
		Store:      store.DefaultConfig(),
		DNS:        dnscache.DefaultConfig(),
		Correlate:  pipeline.DefaultConfig(),
		Rollup:     rollup.DefaultConfig(),
		Outputs: Outputs{
			AMQP:     amqpsink.DefaultConfig(),
			STOMP:    stompsink.DefaultConfig(),
			Postgres: postgres.DefaultConfig(),
			JSONL:    jsonl.DefaultConfig(),
		},
		Cluster: cluster.DefaultConfig(),
		Log:     Log{Level: "info", Format: "text"},
	}
}
