package config

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/xrdmon/xrdmon/internal/amqpconn"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/stompconn"
	"github.com/xrdmon/xrdmon/internal/web"
	"go.yaml.in/yaml/v3"
)

// Validate checks the whole configuration and reports every problem at
// once as an *Error; each problem starts with the key it is about, such as
// "listen.rcvbuf: must be > 0".
func (c *Config) Validate() error {
	var p problems

	// listen
	if c.Listen.UDP != "" {
		p.hostPort("listen.udp", c.Listen.UDP)
	}
	p.check(c.Listen.Readers >= 0, "listen.readers", "must be >= 0 (0 means GOMAXPROCS, at most 4)")
	p.check(c.Listen.BatchSize >= 1 && c.Listen.BatchSize <= 1024, "listen.batch_size", "must be between 1 and 1024")
	p.check(c.Listen.RcvBuf > 0, "listen.rcvbuf", "must be > 0")
	for i, a := range c.Listen.Allow {
		if _, err := parsePrefix(a); err != nil {
			p.add(fmt.Sprintf("listen.allow[%d]", i), err.Error())
		}
	}
	for from, to := range c.Listen.NAT {
		if from != "all" {
			if _, err := netip.ParseAddr(from); err != nil {
				p.add("listen.nat", fmt.Sprintf("key %q is not an IP address or \"all\"", from))
			}
		}
		if _, err := netip.ParseAddr(to); err != nil {
			p.add("listen.nat", fmt.Sprintf("value %q for %q is not an IP address", to, from))
		}
	}
	if c.Listen.UDP == "" && !c.AMQPInput.Enabled && !c.STOMPInput.Enabled && len(c.FileInput.Paths) == 0 {
		p.add("listen.udp", "empty and amqp_input.enabled and stomp_input.enabled are false: there is no input")
	}

	// amqp_input
	in := c.AMQPInput
	p.amqpURL("amqp_input.url", in.URL, in.Enabled)
	if in.Enabled {
		p.check(in.Queue != "", "amqp_input.queue", "required when amqp_input.enabled")
	}
	p.check(in.Prefetch >= 1, "amqp_input.prefetch", "must be >= 1")
	p.tls("amqp_input.tls", in.TLS)

	// stomp_input
	si := c.STOMPInput
	p.stomp("stomp_input", si.Config, si.Enabled)
	p.check(si.Destination != "", "stomp_input.destination", "required")
	p.check(si.Prefetch >= 1, "stomp_input.prefetch", "must be >= 1")

	// rollup
	if err := c.Rollup.Validate(); err != nil {
		p.add("rollup", err.Error())
	}

	// http
	if c.HTTP.PProf && !web.Loopback(c.HTTP.Address) {
		p.add("http.pprof", "needs a loopback http.address (127.0.0.1:PORT or [::1]:PORT): profiles show the process's memory; reach them through an SSH tunnel")
	}
	if c.HTTP.Address != "" {
		p.hostPort("http.address", c.HTTP.Address)
	}

	// store
	p.check(c.Store.Path != "", "store.path", "required")
	p.check(c.Store.Retention >= 0, "store.retention", "must be >= 0 (0 keeps records forever)")
	p.check(c.Store.MaxBytes >= 0, "store.max_bytes", "must be >= 0 (0 means no limit)")

	// dns
	d := c.DNS
	p.check(d.TTL > 0, "dns.ttl", "must be > 0")
	p.check(d.NegativeTTL > 0, "dns.negative_ttl", "must be > 0")
	p.check(d.CacheSize >= 1, "dns.cache_size", "must be >= 1")
	p.check(d.Workers >= 1, "dns.workers", "must be >= 1")
	p.check(d.QueueSize >= 1, "dns.queue_size", "must be >= 1")
	p.check(d.Timeout > 0, "dns.timeout", "must be > 0")
	p.check(d.MaxWait >= 0, "dns.max_wait", "must be >= 0")
	if d.Server != "" {
		p.hostPort("dns.server", d.Server)
	}

	// correlate
	k := c.Correlate
	p.check(k.OpenFileTTL > 0, "correlate.open_file_ttl", "must be > 0")
	p.check(k.MaxEntries >= 1, "correlate.max_entries", "must be >= 1")
	p.check(k.MaxEntriesPerServer >= 1, "correlate.max_entries_per_server", "must be >= 1")
	p.check(k.MaxServersPerAddress >= 1, "correlate.max_servers_per_address", "must be >= 1")
	p.check(k.MaxStateBytes >= 16<<20, "correlate.max_state_bytes", "must be >= 16MiB")
	if k.MaxEntries >= 1 && k.MaxEntriesPerServer > k.MaxEntries {
		p.add("correlate.max_entries_per_server", fmt.Sprintf("must be <= correlate.max_entries (%d)", k.MaxEntries))
	}
	p.check(k.Shards >= 0, "correlate.shards", "must be >= 0 (0 means GOMAXPROCS)")
	p.check(k.CheckpointInterval >= 0, "correlate.checkpoint_interval", "must be >= 0 (0 chooses by input)")

	// outputs
	a := c.Outputs.AMQP
	p.amqpURL("outputs.amqp.url", a.URL, a.Enabled)
	if a.Enabled {
		e := a.Exchanges
		p.check(e.Records != "" || e.WLCG != "" || e.Cache != "" || e.TPC != "" || e.Events != "",
			"outputs.amqp.exchanges", "at least one exchange is required when outputs.amqp.enabled")
	}
	p.check(a.RecordsPerMessage >= 1, "outputs.amqp.records_per_message", "must be >= 1")
	p.check(a.GRACCFlavour == record.GRACCPython || a.GRACCFlavour == record.GRACCGo, "outputs.amqp.gracc_flavour", "must be python or go")
	p.tls("outputs.amqp.tls", a.TLS)
	so := c.Outputs.STOMP
	p.stomp("outputs.stomp", so.Config, so.Enabled)
	if so.Enabled {
		d := so.Destinations
		p.check(d.WLCG != "" || d.Records != "" || d.Events != "",
			"outputs.stomp.destinations", "at least one destination is required when outputs.stomp.enabled")
	}
	p.check(so.RecordsPerMessage >= 1, "outputs.stomp.records_per_message", "must be >= 1")
	p.check(so.MaxMessageBytes > 0, "outputs.stomp.max_message_bytes", "must be > 0")
	pg := c.Outputs.Postgres
	if pg.Enabled && pg.URL == "" {
		p.add("outputs.postgres.url", "required when outputs.postgres.enabled")
	}
	if strings.Contains(pg.URL, "://") {
		if u, err := url.Parse(pg.URL); err != nil {
			p.add("outputs.postgres.url", "invalid URL: "+redactURL(pg.URL))
		} else if u.Scheme != "postgres" && u.Scheme != "postgresql" {
			p.add("outputs.postgres.url", fmt.Sprintf("scheme must be postgres or postgresql, not %q", u.Scheme))
		}
	}
	j := c.Outputs.JSONL
	p.check(!j.Enabled || j.Path != "", "outputs.jsonl.path", "required when outputs.jsonl.enabled")
	p.check(j.Schema == record.SchemaNative || j.Schema == record.SchemaGRACC || j.Schema == record.SchemaWLCG, "outputs.jsonl.schema", "must be native, gracc or wlcg")
	p.check(j.GRACCFlavour == record.GRACCPython || j.GRACCFlavour == record.GRACCGo, "outputs.jsonl.gracc_flavour", "must be python or go")

	// cluster
	if cl := c.Cluster; cl.Enabled {
		p.check(cl.URL != "", "cluster.url", "required when cluster.enabled")
		p.check(c.AMQPInput.Enabled, "cluster.enabled", "needs amqp_input: the shard is the queue it consumes")
		p.check(c.Listen.UDP == "", "cluster.enabled", "listen.udp must be empty: a shard's packets come only from its queue")
		p.check(cl.Schema != "", "cluster.schema", "required when cluster.enabled")
		p.check(c.Correlate.Shards > 0, "correlate.shards", "must be set, the same on every member, when cluster.enabled (a checkpoint restores only into its shard layout)")
	}

	// log
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		p.add("log.level", fmt.Sprintf("must be debug, info, warn or error, not %q", c.Log.Level))
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		p.add("log.format", fmt.Sprintf("must be text or json, not %q", c.Log.Format))
	}

	if len(p) > 0 {
		return &Error{Problems: p}
	}
	return nil
}

type problems []string

func (p *problems) add(key, msg string) { *p = append(*p, key+": "+msg) }

func (p *problems) check(ok bool, key, msg string) {
	if !ok {
		p.add(key, msg)
	}
}

func (p *problems) hostPort(key, addr string) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		p.add(key, fmt.Sprintf("%q is not host:port", addr))
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		p.add(key, fmt.Sprintf("port %q must be a number from 0 to 65535", port))
	}
}

func (p *problems) amqpURL(key, raw string, required bool) {
	if raw == "" {
		if required {
			p.add(key, "required when enabled")
		}
		return
	}
	u, err := url.Parse(raw)
	if err != nil {
		p.add(key, "invalid URL: "+redactURL(raw))
		return
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		p.add(key, fmt.Sprintf("scheme must be amqp or amqps, not %q", u.Scheme))
	}
	if u.Host == "" {
		p.add(key, "missing host")
	}
}

// stomp checks the broker settings of a STOMP section.
func (p *problems) stomp(section string, c stompconn.Config, enabled bool) {
	if c.URL == "" {
		if enabled {
			p.add(section+".url", "required when enabled")
		}
	} else if _, _, err := stompconn.ParseURL(c.URL); err != nil {
		p.add(section+".url", err.Error())
	}
	p.check(c.Heartbeat >= 0, section+".heartbeat", "must be >= 0 (0 turns heart-beating off)")
	p.tls(section+".tls", c.TLS)
}

func (p *problems) tls(key string, t amqpconn.TLS) {
	if (t.Cert == "") != (t.Key == "") {
		p.add(key, "cert and key must be given together")
	}
}

// parsePrefix accepts a CIDR prefix or a single address.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR prefix", s)
		}
		return pfx.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR prefix", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
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
			fv.SetString(redactURL(fv.String()))
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

var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// redactURL hides the password in a URL (scheme://user:pass@host) or in a
// key=value connection string (password=...).
func redactURL(s string) string {
	if s == "" {
		return s
	}
	if strings.Contains(s, "://") {
		if u, err := url.Parse(s); err == nil {
			if q := u.Query(); q.Has("password") {
				q.Set("password", "xxxxx")
				u.RawQuery = q.Encode()
			}
			return u.Redacted()
		}
		// Unparseable: hide everything between "://" and "@".
		scheme, rest, _ := strings.Cut(s, "://")
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			return scheme + "://xxxxx@" + rest[at+1:]
		}
		return s
	}
	return dsnPassword.ReplaceAllString(s, "${1}xxxxx")
}
