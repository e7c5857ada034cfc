// Package amqpconn connects xrdmon to RabbitMQ: the one place for the
// broker URL, the token used as password (the OSG convention), TLS, the
// dial and the redaction of credentials in messages. The AMQP input
// (source/amqp) and the AMQP output (sink/amqp) both dial through it.
package amqpconn

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Config says how to reach a broker. It is inlined in the configuration
// sections of the AMQP input and output (amqp_input.url, outputs.amqp.url,
// ...).
type Config struct {
	URL       string `yaml:"url" secret:"url" help:"broker URL, amqp:// or amqps://"`
	TLS       TLS    `yaml:"tls"`
	TokenFile string `yaml:"token_file" help:"file holding a JWT (e.g. a SciToken) used as the password, per OSG convention; re-read at every connect, and a change of the file reconnects"`
}

// TLS configures the TLS client of amqps:// connections. Empty paths use
// the system roots and no client certificate.
type TLS struct {
	CA       string `yaml:"ca" help:"PEM file of CA certificates to trust instead of the system roots"`
	Cert     string `yaml:"cert" help:"PEM client certificate"`
	Key      string `yaml:"key" help:"PEM client private key"`
	Insecure bool   `yaml:"insecure" help:"skip server certificate verification (testing only)"`
}

// TokenUser is the user name sent with a token when the URL names none:
// the shoveler's. RabbitMQ's OAuth 2 backend ignores it.
const TokenUser = "shoveler"

// Options tune a Dialer. The zero value is valid.
type Options struct {
	// Name is the connection name shown in RabbitMQ's management UI.
	Name string
	// Timeout bounds the TCP connect and the AMQP handshake (default 10s).
	Timeout time.Duration
	// Heartbeat is the AMQP heartbeat interval (default 10s): a dead peer
	// is noticed after about two of them.
	Heartbeat time.Duration
	// Wrap, when set, wraps every socket dialed (before TLS).
	Wrap func(net.Conn) net.Conn
}

// Dialer dials one broker as its Config says. It is safe for concurrent
// use.
type Dialer struct {
	cfg  Config
	opts Options
	tls  *tls.Config

	mu        sync.Mutex
	tokenTime time.Time // modification time of the token used at the last dial
}

// NewDialer checks cfg (the URL parses, the TLS files load) without
// connecting.
func NewDialer(cfg Config, opts Options) (*Dialer, error) {
	if _, err := amqp.ParseURI(cfg.URL); err != nil {
		// The parser's error quotes the URL, password included.
		return nil, fmt.Errorf("amqp url %s is not valid: want amqp[s]://user:password@host:port/vhost, with reserved characters of the user and password percent-encoded", Redact(cfg.URL))
	}
	tc, err := cfg.TLS.ClientConfig()
	if err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 10 * time.Second
	}
	return &Dialer{cfg: cfg, opts: opts, tls: tc}, nil
}

// URL returns the broker URL without its password, for messages.
func (d *Dialer) URL() string { return Redact(d.cfg.URL) }

// Dial connects, logging in with the token file's content as the
// password when one is configured (read now, so a rotated token is used).
func (d *Dialer) Dial(ctx context.Context) (*amqp.Connection, error) {
	conf := amqp.Config{
		Heartbeat:  d.opts.Heartbeat,
		Locale:     "en_US",
		Properties: amqp.NewConnectionProperties(),
		Dial: func(network, addr string) (net.Conn, error) {
			nd := net.Dialer{Timeout: d.opts.Timeout}
			c, err := nd.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// A deadline for the handshakes; the client clears it once
			// connected (as amqp.DefaultDial does).
			if err := c.SetDeadline(time.Now().Add(d.opts.Timeout)); err != nil {
				c.Close()
				return nil, err
			}
			if d.opts.Wrap != nil {
				c = d.opts.Wrap(c)
			}
			return c, nil
		},
	}
	conf.Properties.SetClientConnectionName("xrdmon " + d.opts.Name)
	conf.Properties["product"] = "xrdmon"
	if d.tls != nil {
		conf.TLSClientConfig = d.tls.Clone()
	}
	if d.cfg.TokenFile != "" {
		tok, mtime, err := readToken(d.cfg.TokenFile)
		if err != nil {
			return nil, err
		}
		user := TokenUser
		if u, err := url.Parse(d.cfg.URL); err == nil && u.User != nil && u.User.Username() != "" {
			user = u.User.Username()
		}
		conf.SASL = []amqp.Authentication{&amqp.PlainAuth{Username: user, Password: tok}}
		d.mu.Lock()
		d.tokenTime = mtime
		d.mu.Unlock()
	}
	conn, err := amqp.DialConfig(d.cfg.URL, conf)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", d.URL(), err)
	}
	return conn, nil
}

// TokenChanged reports whether the token file was modified since the last
// Dial read it: the connection should be made again with
// the new token. It is false without a token file.
func (d *Dialer) TokenChanged() bool {
	if d.cfg.TokenFile == "" {
		return false
	}
	st, err := os.Stat(d.cfg.TokenFile)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tokenTime.IsZero() {
		return false // never dialed with it
	}
	return err == nil && !st.ModTime().Equal(d.tokenTime)
}

// readToken returns the JWT in path, without surrounding white space, and
// the file's modification time.
func readToken(path string) (string, time.Time, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("token file: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("token file: %w", err)
	}
	tok := string(bytes.TrimSpace(b))
	if tok == "" {
		return "", time.Time{}, fmt.Errorf("token file %s: empty", path)
	}
	return tok, st.ModTime(), nil
}

// ClientConfig builds the client TLS configuration from the files t
// names; nil when t sets nothing (a TLS connection then uses the system
// roots and no client certificate). The STOMP connections use it too.
func (t TLS) ClientConfig() (*tls.Config, error) {
	if t == (TLS{}) {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.Insecure} //nolint:gosec // opt-in, testing only
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("tls ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca %s: no certificate found", t.CA)
		}
		c.RootCAs = pool
	}
	if t.Cert != "" || t.Key != "" {
		cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("tls client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// Redact returns a URL with its password replaced by "xxxxx", for logs
// and errors. A text that does not parse as a URL is returned as
// "(unparsable URL)", since it may hold a password anywhere.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
