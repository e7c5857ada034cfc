package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/confcheck"
	"github.com/xrdmon/xrdmon/internal/units"
	"go.yaml.in/yaml/v3"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "xrdmon.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// loadArgs parses args as a command line the way main does.
func loadArgs(t *testing.T, path string, env, args []string) (*Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	ov := RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse flags: %v", err)
	}
	return Load(path, env, ov)
}

// TestPProfLoopbackOnly: profiles may be turned on only with a loopback
// HTTP address.
func TestPProfLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:9939": true, "[::1]:9939": true, "localhost:9939": true,
		":9939": false, "0.0.0.0:9939": false, "192.0.2.1:9939": false, "[::]:9939": false,
	} {
		c := Default()
		c.HTTP.Address, c.HTTP.PProf = addr, true
		err := c.Validate()
		if (err == nil) != ok {
			t.Errorf("http.pprof with %s: Validate = %v, want ok=%v", addr, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "http.pprof") {
			t.Errorf("error does not name the key: %v", err)
		}
	}
}

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if c.Listen.UDP != ":9930" || c.HTTP.Address != "127.0.0.1:9939" || c.HTTP.PProf || c.Listen.RcvBuf != 256<<20 {
		t.Errorf("unexpected defaults: %+v %+v", c.Listen, c.HTTP)
	}
	if c.DNS.TTL.D() != 24*time.Hour || c.Store.Retention.D() != 90*24*time.Hour {
		t.Errorf("unexpected duration defaults: dns.ttl=%v store.retention=%v", c.DNS.TTL, c.Store.Retention)
	}
	if r, s := c.Listen.Options().Readers, c.Correlate.Options(false).Shards; r < 1 || s < 1 {
		t.Errorf("readers %d, shards %d, want >= 1", r, s)
	}
}

func TestPrecedence(t *testing.T) {
	path := writeFile(t, `
listen:
  readers: 2
  batch_size: 16
  rcvbuf: 8MiB
dns:
  ttl: 1h
log:
  level: warn
`)
	env := []string{
		"XRDMON_LISTEN_BATCH_SIZE=32",   // env over file
		"XRDMON_LISTEN_RCVBUF=16MiB",    // env over file, flag over env
		"XRDMON_DNS_NEGATIVE_TTL=5m",    // env over default
		"XRDMON_TEST_AMQP_URL=amqp://x", // not a key: ignored
		"PATH=/bin",
	}
	args := []string{"--listen.rcvbuf=32MiB", "-log.format", "json", "--dns.enabled=false"}
	c, err := loadArgs(t, path, env, args)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		key       string
		got, want any
	}{
		{"listen.readers (file)", c.Listen.Readers, 2},
		{"listen.batch_size (env over file)", c.Listen.BatchSize, 32},
		{"listen.rcvbuf (flag over env over file)", c.Listen.RcvBuf, units.ByteSize(32 << 20)},
		{"dns.ttl (file)", c.DNS.TTL, units.Duration(time.Hour)},
		{"dns.negative_ttl (env)", c.DNS.NegativeTTL, units.Duration(5 * time.Minute)},
		{"dns.enabled (flag)", c.DNS.Enabled, false},
		{"log.level (file)", c.Log.Level, "warn"},
		{"log.format (flag)", c.Log.Format, "json"},
		{"store.path (default)", c.Store.Path, "./xrdmon-data"},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s = %v, want %v", ck.key, ck.got, ck.want)
		}
	}
}

func TestBoolFlagWithoutValue(t *testing.T) {
	c, err := loadArgs(t, "", nil, []string{"--amqp_input.enabled", "--amqp_input.url=amqp://h/"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.AMQPInput.Enabled {
		t.Error("--amqp_input.enabled did not enable")
	}
}

func TestEnvListsAndMaps(t *testing.T) {
	env := []string{
		"XRDMON_LISTEN_ALLOW=10.0.0.0/8, 192.0.2.7 ,",
		"XRDMON_LISTEN_NAT=192.168.0.5=172.0.0.5,all=172.0.0.4",
		"XRDMON_OUTPUTS_AMQP_EXCHANGES_WLCG=xrd.wlcg",
	}
	c, err := Load("", env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.0.0.0/8", "192.0.2.7"}; !slices.Equal(c.Listen.Allow, want) {
		t.Errorf("allow = %q, want %q", c.Listen.Allow, want)
	}
	if want := map[string]string{"192.168.0.5": "172.0.0.5", "all": "172.0.0.4"}; !reflect.DeepEqual(c.Listen.NAT, want) {
		t.Errorf("nat = %v, want %v", c.Listen.NAT, want)
	}
	if c.Outputs.AMQP.Exchanges.WLCG != "xrd.wlcg" {
		t.Errorf("outputs.amqp.exchanges.wlcg = %q", c.Outputs.AMQP.Exchanges.WLCG)
	}
	if f := c.Listen.Filter(); f.MapAll != "172.0.0.4" || f.Map["192.168.0.5"] != "172.0.0.5" || len(f.Allow) != 2 {
		t.Errorf("Filter() = %+v", f)
	}
}

func TestEnvAndFlagErrorsNameTheKey(t *testing.T) {
	_, err := loadArgs(t, "", []string{"XRDMON_DNS_TTL=soon", "XRDMON_LISTEN_READERS=x"}, []string{"--store.max_bytes=big"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`XRDMON_DNS_TTL (dns.ttl): invalid duration "soon"`,
		`XRDMON_LISTEN_READERS (listen.readers): invalid integer "x"`,
		`--store.max_bytes: invalid size "big"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Problems) != 3 {
		t.Errorf("want *Error with 3 problems, got %#v", err)
	}
}

func TestUnknownFlag(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	RegisterFlags(fs)
	if err := fs.Parse([]string{"--listen.rcvbuff=1"}); err == nil {
		t.Error("unknown flag accepted")
	}
}

func TestEnvNamesAreUnique(t *testing.T) {
	seen := map[string]string{}
	for _, f := range fields {
		if other, ok := seen[f.env]; ok {
			t.Errorf("keys %s and %s share env var %s", other, f.key, f.env)
		}
		seen[f.env] = f.key
		if f.help == "" && !strings.Contains(f.key, ".exchanges.") && !strings.Contains(f.key, ".tls.") {
			t.Errorf("key %s has no help text", f.key)
		}
	}
	if EnvName("amqp_input.tls.ca") != "XRDMON_AMQP_INPUT_TLS_CA" {
		t.Errorf("EnvName(amqp_input.tls.ca) = %q", EnvName("amqp_input.tls.ca"))
	}
}

func TestUnknownEnv(t *testing.T) {
	got := UnknownEnv([]string{"XRDMON_DNS_TTL=1h", "XRDMON_DNS_TTTL=1h", "XRDMON_TEST_PG_URL=x", "XRDMON_CONFIG=/x", "HOME=/"})
	if !slices.Equal(got, []string{"XRDMON_DNS_TTTL"}) {
		t.Errorf("UnknownEnv = %q", got)
	}
}

func TestTestdata(t *testing.T) {
	expected := map[string][]string{
		"unknown-key.bad.yaml": {
			`listen.rcvbuff (line 3): unknown key (did you mean "rcvbuf"?)`,
			`dns.worker (line 6): unknown key (did you mean "workers"?)`,
			`storage (line 7): unknown key (did you mean "store"?)`,
		},
		"bad-types.bad.yaml": {
			"listen.readers (line 2): cannot unmarshal !!str `many` into int",
			`listen.rcvbuf (line 3): invalid size "lots"`,
			`dns.ttl (line 5): invalid duration "3 days"`,
			"dns.enabled (line 6): cannot unmarshal !!str `maybe` into bool",
			`correlate.open_file_ttl (line 8): missing unit in duration "10"`,
		},
		"bad-values.bad.yaml": {
			`listen.udp: "9930" is not host:port`,
			"listen.rcvbuf: must be > 0",
			"listen.batch_size: must be between 1 and 1024",
			`listen.allow[0]: "10.0.0.0/33" is not a CIDR prefix`,
			`listen.allow[1]: "not-an-ip" is not an address or CIDR prefix`,
			`listen.nat: value "somewhere" for "192.168.0.5" is not an IP address`,
			`http.address: port "http" must be a number`,
			"store.path: required",
			"store.retention: must be >= 0",
			"dns.workers: must be >= 1",
			"dns.timeout: must be > 0",
			"correlate.max_entries_per_server: must be <= max_entries (10)",
			`outputs.amqp.url: scheme must be amqp or amqps, not "http"`,
			"outputs.amqp.exchanges: at least one exchange is required",
			"outputs.amqp.gracc_flavour: must be python or go",
			"outputs.jsonl.schema: must be native, gracc or wlcg",
			"outputs.jsonl.gracc_flavour: must be python or go",
			"outputs.postgres.url: required when outputs.postgres.enabled",
			`log.level: must be debug, info, warn or error, not "verbose"`,
			`log.format: must be text or json, not "xml"`,
		},
		"stomp.bad.yaml": {
			"stomp_input.url: the stomp url holds a password: put it in password_file",
			"stomp_input.destination: required",
			"stomp_input.prefetch: must be >= 1",
			"stomp_input.tls: cert and key must be given together",
			`outputs.stomp.url: stomp url: scheme "http": want stomp or stomp+ssl`,
			"outputs.stomp.destinations: at least one destination is required",
			"outputs.stomp.records_per_message: must be >= 1",
			"outputs.stomp.gracc_flavour: must be python or go",
		},
		"no-input.bad.yaml":    {"listen.udp: empty and amqp_input.enabled and stomp_input.enabled are false: there is no input"},
		"duplicate.bad.yaml":   {"dns.ttl (line 3): duplicate key"},
		"not-mapping.bad.yaml": {"listen (line 1): expected a mapping of keys"},
		"syntax.bad.yaml":      {"parse yaml:"},
	}
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	seenBad := map[string]bool{}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			c, err := Load(path, nil, nil)
			switch {
			case strings.HasSuffix(name, ".good.yaml"):
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if c == nil {
					t.Fatal("nil config")
				}
			case strings.HasSuffix(name, ".bad.yaml"):
				seenBad[name] = true
				want, ok := expected[name]
				if !ok {
					t.Fatalf("no expected errors for %s", name)
				}
				if err == nil {
					t.Fatal("Load succeeded")
				}
				var ce *Error
				if !errors.As(err, &ce) {
					t.Fatalf("error %T is not *Error: %v", err, err)
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error does not contain %q:\n%v", w, err)
					}
				}
				for _, p := range ce.Problems {
					if !strings.HasPrefix(p, path+": ") && !strings.HasPrefix(p, "listen") &&
						!strings.Contains(p, ".") {
						t.Errorf("problem %q names no key", p)
					}
				}
			default:
				t.Fatalf("testdata file %s is neither .good.yaml nor .bad.yaml", name)
			}
		})
	}
	for name := range expected {
		if !seenBad[name] {
			t.Errorf("expected errors for %s, but the file is missing", name)
		}
	}
}

func TestGoodFileValues(t *testing.T) {
	c, err := Load("testdata/amqp-only.good.yaml", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen.UDP != "" || !c.AMQPInput.Enabled || c.AMQPInput.Queue != "xrdmon" {
		t.Errorf("listen/amqp_input = %+v %+v", c.Listen, c.AMQPInput)
	}
	if c.Store.Retention.D() != 14*24*time.Hour || c.Store.MaxBytes != 20<<30 {
		t.Errorf("store = %+v", c.Store)
	}
	if c.DNS.MaxWait != 0 || c.DNS.TTL.D() != 12*time.Hour || c.DNS.NegativeTTL.D() != time.Hour {
		t.Errorf("dns = %+v", c.DNS)
	}
	if c.Outputs.AMQP.RecordsPerMessage != 50 || c.Outputs.AMQP.Exchanges.Records != "xrd.detailed" {
		t.Errorf("outputs.amqp = %+v", c.Outputs.AMQP)
	}
}

// TestExample checks that xrdmon.example.yaml loads, mentions every key,
// and (as its header says) shows the defaults.
func TestExample(t *testing.T) {
	const path = "../../xrdmon.example.yaml"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(path, nil, nil)
	if err != nil {
		t.Fatalf("Load example: %v", err)
	}
	if !reflect.DeepEqual(normalize(c), normalize(Default())) {
		got, _ := c.YAML()
		want, _ := Default().YAML()
		t.Errorf("example differs from Default():\n--- example\n%s\n--- default\n%s", got, want)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind != yaml.MappingNode {
			have[prefix] = true
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if prefix != "" {
				k = prefix + "." + k
			}
			if n.Content[i+1].Kind == yaml.MappingNode && len(n.Content[i+1].Content) == 0 {
				have[k] = true // e.g. nat: {}
			}
			walk(n.Content[i+1], k)
		}
	}
	walk(root.Content[0], "")
	for _, k := range Keys() {
		if !have[k] {
			t.Errorf("xrdmon.example.yaml does not mention %s", k)
		}
	}
}

// normalize makes nil and empty lists and maps compare equal.
func normalize(c *Config) *Config {
	cp := *c
	if len(cp.Listen.Allow) == 0 {
		cp.Listen.Allow = nil
	}
	if len(cp.Listen.NAT) == 0 {
		cp.Listen.NAT = nil
	}
	if len(cp.FileInput.Paths) == 0 {
		cp.FileInput.Paths = nil
	}
	return &cp
}

func TestYAMLRoundTripAndRedaction(t *testing.T) {
	c, err := Load("testdata/amqp-only.good.yaml", []string{
		"XRDMON_OUTPUTS_AMQP_URL=amqps://pub:topsecret@broker.example.org/osg",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"secret", "topsecret", "hunter2"} {
		if strings.Contains(string(out), ":"+secret+"@") || strings.Contains(string(out), "="+secret) {
			t.Errorf("YAML() leaks %q:\n%s", secret, out)
		}
	}
	for _, want := range []string{"amqps://xrdmon:xxxxx@broker.example.org:5671/osg", "password=xxxxx", "retention: 14d", "max_bytes: 20GiB"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("YAML() lacks %q:\n%s", want, out)
		}
	}
	if c.AMQPInput.URL != "amqps://xrdmon:secret@broker.example.org:5671/osg" {
		t.Errorf("YAML() modified the config: %q", c.AMQPInput.URL)
	}
	back, err := Parse(out)
	if err != nil {
		t.Fatalf("Parse(YAML()): %v\n%s", err, out)
	}
	back.AMQPInput.URL = c.AMQPInput.URL
	back.Outputs.AMQP.URL = c.Outputs.AMQP.URL
	back.Outputs.Postgres.URL = c.Outputs.Postgres.URL
	if !reflect.DeepEqual(normalize(back), normalize(c)) {
		t.Errorf("round trip differs:\n%+v\n%+v", back, c)
	}
}

func TestRedactURL(t *testing.T) {
	cases := map[string]string{
		"":                                   "",
		"amqp://guest:guest@127.0.0.1:5672/": "amqp://guest:xxxxx@127.0.0.1:5672/",
		"amqps://broker/vhost":               "amqps://broker/vhost",
		"postgres://u:p@h/db?sslmode=off":    "postgres://u:xxxxx@h/db?sslmode=off",
		"postgres://u@h/db?password=p":       "postgres://u@h/db?password=xxxxx",
		"host=h password=p user=u":           "host=h password=xxxxx user=u",
		"host=h password='a b' user=u":       "host=h password=xxxxx user=u",
		"amqp://u:p%zz@h/":                   "amqp://xxxxx@h/",
	}
	for in, want := range cases {
		if got := confcheck.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFlagHelpShowsDefaultsAndEnv(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	RegisterFlags(fs)
	f := fs.Lookup("dns.ttl")
	if f == nil {
		t.Fatal("no --dns.ttl flag")
	}
	if f.DefValue != "24h" || !strings.Contains(f.Usage, "XRDMON_DNS_TTL") {
		t.Errorf("--dns.ttl default %q usage %q", f.DefValue, f.Usage)
	}
	if g := fs.Lookup("listen.rcvbuf"); g == nil || g.DefValue != "256MiB" {
		t.Errorf("--listen.rcvbuf = %+v", g)
	}
	var ov Overrides
	if err := ov.Set("no.such.key", "1"); err == nil {
		t.Error("Overrides.Set accepted an unknown key")
	}
}
