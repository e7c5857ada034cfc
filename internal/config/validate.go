package config

import (
	"bytes"
	"fmt"

	"github.com/xrdmon/xrdmon/internal/confcheck"
	"go.yaml.in/yaml/v3"
)

// Validate checks the whole configuration and reports every problem at
// once as an *Error; each problem starts with the key it is about, such as
// "listen.rcvbuf: must be > 0". Each section's own rules are its
// component's (Config.Validate beside the fields); here are the rules
// that span sections.
func (c *Config) Validate() error {
	var p confcheck.Problems
	for _, s := range []struct {
		key string
		err error
	}{
		{"listen", c.Listen.Validate()},
		{"amqp_input", c.AMQPInput.Validate()},
		{"stomp_input", c.STOMPInput.Validate()},
		{"rollup", c.Rollup.Validate()},
		{"http", c.HTTP.Validate()},
		{"store", c.Store.Validate()},
		{"dns", c.DNS.Validate()},
		{"correlate", c.Correlate.Validate()},
		{"outputs.amqp", c.Outputs.AMQP.Validate()},
		{"outputs.stomp", c.Outputs.STOMP.Validate()},
		{"outputs.postgres", c.Outputs.Postgres.Validate()},
		{"outputs.jsonl", c.Outputs.JSONL.Validate()},
		{"cluster", c.Cluster.Validate()},
	} {
		p.Sub(s.key, s.err)
	}
	if c.Listen.UDP == "" && !c.AMQPInput.Enabled && !c.STOMPInput.Enabled && len(c.FileInput.Paths) == 0 {
		p.Add("listen.udp", "empty and amqp_input.enabled and stomp_input.enabled are false: there is no input")
	}
	if c.Cluster.Enabled {
		p.Check(c.AMQPInput.Enabled, "cluster.enabled", "needs amqp_input: the shard is the queue it consumes")
		p.Check(c.Listen.UDP == "", "cluster.enabled", "listen.udp must be empty: a shard's packets come only from its queue")
		p.Check(c.Correlate.Shards > 0, "correlate.shards", "must be set, the same on every member, when cluster.enabled (a checkpoint restores only into its shard layout)")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		p.Add("log.level", fmt.Sprintf("must be debug, info, warn or error, not %q", c.Log.Level))
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		p.Add("log.format", fmt.Sprintf("must be text or json, not %q", c.Log.Format))
	}
	return p.Err()
}

// YAML returns the configuration as YAML, for --print-config. Passwords in
// URL fields are replaced by "xxxxx"; the output loads back into the same
// configuration except for those.
func (c *Config) YAML() ([]byte, error) {
	cp := *c // only string fields are changed below, so a shallow copy is enough
	v := reflectValue(&cp)
	for _, f := range fields {
		if f.secret {
			fv := v.FieldByIndex(f.index)
			fv.SetString(confcheck.RedactURL(fv.String()))
		}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&cp); err != nil {
		return nil, fmt.Errorf("marshal config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("marshal config: %w", err)
	}
	return buf.Bytes(), nil
}
