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
	"runtime"
	"time"

	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/pipeline"
)

// Config is the whole configuration of "xrdmon collect". The zero value is
// not useful; start from Default or Load.
type Config struct {
	Listen    Listen    `yaml:"listen"`
	AMQPInput AMQPInput `yaml:"amqp_input"`
	FileInput FileInput `yaml:"file_input"`
	HTTP      HTTP      `yaml:"http"`
	Store     Store     `yaml:"store"`
	DNS       DNS       `yaml:"dns"`
	Correlate Correlate `yaml:"correlate"`
	Outputs   Outputs   `yaml:"outputs"`
	Log       Log       `yaml:"log"`
}

// Listen configures the UDP source that XRootD servers (or a shoveler
// forwarding raw UDP) send monitoring packets to.
type Listen struct {
	UDP       string            `yaml:"udp" help:"UDP address to receive XRootD monitoring packets on; \":9930\" is every IPv4 and IPv6 address; empty disables UDP"`
	Readers   int               `yaml:"readers" help:"reader goroutines on the UDP socket; 0 means GOMAXPROCS"`
	BatchSize int               `yaml:"batch_size" help:"datagrams read per batch by each reader"`
	RcvBuf    ByteSize          `yaml:"rcvbuf" help:"socket receive buffer (SO_RCVBUF); the kernel may cap it (net.core.rmem_max)"`
	Allow     []string          `yaml:"allow" help:"sender networks (CIDR or address) accepted; empty accepts every sender"`
	NAT       map[string]string `yaml:"nat" help:"rewrite sender addresses, like the shoveler's map: private address (or \"all\") -> public address; the port is kept"`
}

// TLS configures a TLS client. Empty paths use the system roots and no
// client certificate.
type TLS struct {
	CA       string `yaml:"ca" help:"PEM file of CA certificates to trust instead of the system roots"`
	Cert     string `yaml:"cert" help:"PEM client certificate"`
	Key      string `yaml:"key" help:"PEM client private key"`
	Insecure bool   `yaml:"insecure" help:"skip server certificate verification (testing only)"`
}

// AMQPInput configures the AMQP source: packets shoveled into RabbitMQ by
// xrootd-monitoring-shoveler.
type AMQPInput struct {
	Enabled    bool   `yaml:"enabled" help:"consume shoveled packets from AMQP"`
	URL        string `yaml:"url" secret:"url" help:"broker URL, amqp:// or amqps://"`
	Queue      string `yaml:"queue" help:"queue to consume from (declared durable if absent)"`
	Exchange   string `yaml:"exchange" help:"exchange to bind the queue to; empty uses an existing binding"`
	BindingKey string `yaml:"binding_key" help:"routing key of the binding; \"#\" for everything on a topic exchange"`
	Prefetch   int    `yaml:"prefetch" help:"unacknowledged deliveries the broker may send ahead"`
	TLS        TLS    `yaml:"tls"`
	TokenFile  string `yaml:"token_file" help:"file holding a JWT used as the password (OSG convention); re-read at every connect"`
}

// FileInput makes collect import captures: it reads them through the same
// pipeline as live input, with time following the captured packets, and
// exits at their end (open transfers stay in the checkpoint, as at any
// shutdown). The live inputs are not opened.
type FileInput struct {
	Paths []string `yaml:"paths" help:"captures to import instead of live input (shoveler JSON lines, pcap or pcapng; - is standard input); collect exits at their end"`
	Flush bool     `yaml:"flush" help:"at the end of the captures, write files still open as partial records (end_of_input, as replay does) instead of keeping them in the checkpoint"`
}

// HTTP configures the web server: /metrics, /healthz, /readyz and, when
// asked for, /debug/pprof.
type HTTP struct {
	Address string `yaml:"address" help:"HTTP listen address for metrics and health; loopback by default; empty disables it"`
	PProf   bool   `yaml:"pprof" help:"serve Go profiles on /debug/pprof/ (only with a loopback http.address: profiles show memory contents)"`
}

// Store configures the embedded store, the durable record log that sinks
// read from.
type Store struct {
	Path      string   `yaml:"path" help:"directory holding the store's files"`
	Retention Duration `yaml:"retention" help:"records older than this are deleted; 0 keeps them forever"`
	MaxBytes  ByteSize `yaml:"max_bytes" help:"the oldest records are deleted to stay under this size; 0 means no size limit"`
}

// DNS configures reverse DNS of server and client addresses. Lookups run in
// the background and never block the packet path.
type DNS struct {
	Enabled     bool     `yaml:"enabled" help:"resolve server and client addresses to host names"`
	TTL         Duration `yaml:"ttl" help:"how long a resolved name is kept"`
	NegativeTTL Duration `yaml:"negative_ttl" help:"how long a failed lookup (no name, timeout) is kept before retrying"`
	CacheSize   int      `yaml:"cache_size" help:"addresses kept in the cache (least recently used are evicted)"`
	Workers     int      `yaml:"workers" help:"concurrent lookups"`
	QueueSize   int      `yaml:"queue_size" help:"lookups waiting for a worker; more are dropped and counted"`
	Timeout     Duration `yaml:"timeout" help:"time limit of one lookup"`
	MaxWait     Duration `yaml:"max_wait" help:"how long a record waits for a name before it is written with the address"`
	Server      string   `yaml:"server" help:"DNS server host:port to query instead of the system's resolvers"`
}

// Correlate bounds the correlator's per-server state.
type Correlate struct {
	OpenFileTTL          Duration `yaml:"open_file_ttl" help:"a file open for longer without a close is written as a partial record (reason timeout)"`
	MaxEntries           int      `yaml:"max_entries" help:"open files, sessions and users tracked in total; beyond it the oldest are written as partial records (reason evicted)"`
	MaxEntriesPerServer  int      `yaml:"max_entries_per_server" help:"the same bound for one XRootD server"`
	MaxStateBytes        ByteSize `yaml:"max_state_bytes" help:"estimated memory of the correlation state in total (open files, sessions, pending references, interned texts); over it the least recently used entries are evicted as for max_entries"`
	MaxServersPerAddress int      `yaml:"max_servers_per_address" help:"server incarnations (start time, server id) kept per sender address; forged ones from one address evict only that address's"`
	Shards               int      `yaml:"shards" help:"correlator goroutines, servers are spread over them; 0 means GOMAXPROCS"`
	CheckpointInterval   Duration `yaml:"checkpoint_interval" help:"how often the correlation state is checkpointed into the store (and RabbitMQ input acknowledged); 0 means 2s with amqp_input, 30s for UDP only"`
}

// Outputs configures the sinks. Each reads the store's log from its own
// cursor.
type Outputs struct {
	AMQP     AMQPOutput     `yaml:"amqp"`
	Postgres PostgresOutput `yaml:"postgres"`
	JSONL    JSONLOutput    `yaml:"jsonl"`
}

// Exchanges names the AMQP exchange for each kind of message. An empty name
// means that kind is not published.
type Exchanges struct {
	Records string `yaml:"records" help:"exchange for transfer records in the GRACC format"`
	WLCG    string `yaml:"wlcg" help:"exchange for records in the WLCG format"`
	Cache   string `yaml:"cache" help:"exchange for XCache (g-stream) events"`
	TPC     string `yaml:"tpc" help:"exchange for third-party-copy events"`
	Events  string `yaml:"events" help:"exchange for other events (server start, redirects, ...)"`
}

// AMQPOutput configures the AMQP sink.
type AMQPOutput struct {
	Enabled           bool      `yaml:"enabled" help:"publish records to AMQP"`
	URL               string    `yaml:"url" secret:"url" help:"broker URL, amqp:// or amqps://"`
	Exchanges         Exchanges `yaml:"exchanges"`
	RecordsPerMessage int       `yaml:"records_per_message" help:"records packed into one message (a JSON array when > 1; 1 sends one JSON object per message)"`
	TLS               TLS       `yaml:"tls"`
	TokenFile         string    `yaml:"token_file" help:"file holding a JWT used as the password (OSG convention); re-read at every connect"`
}

// PostgresOutput configures the PostgreSQL sink.
type PostgresOutput struct {
	Enabled bool   `yaml:"enabled" help:"write records to PostgreSQL"`
	URL     string `yaml:"url" secret:"url" help:"connection string, postgres://user:pass@host/db or key=value form"`
}

// JSONLOutput configures the JSON-lines file sink.
type JSONLOutput struct {
	Enabled bool   `yaml:"enabled" help:"append records as JSON lines to a file"`
	Path    string `yaml:"path" help:"file to append to; \"-\" is standard output"`
}

// Log configures the daemon's own log.
type Log struct {
	Level  string `yaml:"level" help:"debug, info, warn or error"`
	Format string `yaml:"format" help:"text or json"`
}

// Default ports. 9930 is the port XRootD documentation uses for detailed
// monitoring (xrootd.monitor dest) and 9931 for summary monitoring
// (xrd.report); 9939 is free of both and of the shoveler's 9993.
const (
	DefaultUDPPort  = "9930"
	DefaultHTTPPort = "9939"
)

// Default returns the default configuration. It is valid as is: a daemon
// receiving UDP on :9930, storing into ./xrdmon-data and serving HTTP on
// 127.0.0.1:9939, with no outputs besides the store.
func Default() *Config {
	return &Config{
		Listen: Listen{
			UDP:       ":" + DefaultUDPPort,
			Readers:   0,
			BatchSize: 64,
			RcvBuf:    256 << 20,
		},
		AMQPInput: AMQPInput{
			Queue:      "xrdmon",
			BindingKey: "#",
			Prefetch:   1000,
		},
		HTTP: HTTP{Address: "127.0.0.1:" + DefaultHTTPPort},
		Store: Store{
			Path:      "./xrdmon-data",
			Retention: Duration(90 * 24 * time.Hour),
		},
		DNS: DNS{
			Enabled:     true,
			TTL:         Duration(24 * time.Hour),
			NegativeTTL: Duration(time.Hour),
			CacheSize:   100_000,
			Workers:     8,
			QueueSize:   4096,
			Timeout:     Duration(5 * time.Second),
			MaxWait:     Duration(pipeline.DefaultOptions().DNSMaxWait),
		},
		Correlate: Correlate{
			OpenFileTTL:          Duration(correlate.DefaultConfig().OpenTTL),
			MaxEntries:           2_000_000,
			MaxEntriesPerServer:  200_000,
			MaxServersPerAddress: 32,
			MaxStateBytes:        1 << 30,
			Shards:               0,
		},
		Outputs: Outputs{
			AMQP: AMQPOutput{
				// The OSG collector's exchanges (Collectors/DetailedCollector.py).
				Exchanges: Exchanges{
					Records: "xrd.detailed",
					WLCG:    "xrd.wlcg_format",
					Cache:   "xrd.cache.stash",
					TPC:     "xrd.tpc",
				},
				RecordsPerMessage: 1,
			},
			JSONL: JSONLOutput{Path: "-"},
		},
		Log: Log{Level: "info", Format: "text"},
	}
}

// ReaderCount resolves Readers: 0 means GOMAXPROCS.
func (l Listen) ReaderCount() int {
	if l.Readers > 0 {
		return l.Readers
	}
	return runtime.GOMAXPROCS(0)
}

// Checkpoint resolves CheckpointInterval: 0 means 2 s when input is
// acknowledged at checkpoints (amqp), else 30 s.
func (c Correlate) Checkpoint(acknowledged bool) time.Duration {
	switch {
	case c.CheckpointInterval > 0:
		return c.CheckpointInterval.D()
	case acknowledged:
		return 2 * time.Second
	default:
		return 30 * time.Second
	}
}

// ShardCount resolves Shards: 0 means GOMAXPROCS.
func (c Correlate) ShardCount() int {
	if c.Shards > 0 {
		return c.Shards
	}
	return runtime.GOMAXPROCS(0)
}
