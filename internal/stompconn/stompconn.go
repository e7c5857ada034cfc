// Package stompconn connects xrdmon to a STOMP broker (ActiveMQ, the
// WLCG side of the message bus, or RabbitMQ's STOMP plugin): the one place
// for the broker URL, the login and its password file, TLS with client
// certificates, heart-beating and the dial. The STOMP input (source/stomp)
// and the STOMP output (sink/stomp) both dial through it.
package stompconn

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/go-stomp/stomp/v3"

	"github.com/xrdmon/xrdmon/internal/amqpconn"
	"github.com/xrdmon/xrdmon/internal/units"
)

// Config says how to reach a broker. It is inlined in the configuration
// sections of the STOMP input and output (stomp_input.url,
// outputs.stomp.url, ...). The password is read from a file, never given
// in the configuration or on the command line.
type Config struct {
	URL          string       `yaml:"url" help:"broker URL: stomp://host:port, or stomp+ssl://host:port for TLS (ActiveMQ's names; port 61613 by default, 61614 with TLS)"`
	User         string       `yaml:"user" help:"login sent in the CONNECT frame (empty: none, e.g. with a client certificate)"`
	PasswordFile string       `yaml:"password_file" help:"file holding the passcode; re-read at every connect"`
	VHost        string       `yaml:"vhost" help:"the CONNECT frame's host header (RabbitMQ's virtual host); empty: the broker's host name"`
	TLS          amqpconn.TLS `yaml:"tls"`
	// Heartbeat is the heart-beat interval asked for in both directions:
	// a dead broker is noticed after about one and a half of them.
	Heartbeat units.Duration `yaml:"heartbeat" help:"STOMP heart-beat interval, both directions (0 turns heart-beating off)"`
}

// DefaultHeartbeat is the heart-beat interval of DefaultConfig.
const DefaultHeartbeat = 10 * time.Second

// Default ports, ActiveMQ's.
const (
	DefaultPort    = "61613"
	DefaultTLSPort = "61614"
)

// Options tune a Dialer. The zero value is valid.
type Options struct {
	// Timeout bounds the TCP connect, the TLS handshake and the STOMP
	// CONNECT exchange (default 10s).
	Timeout time.Duration
	// ClientID, when set, is sent as the CONNECT frame's client-id header:
	// ActiveMQ keys durable topic subscriptions by it.
	ClientID string
	// Wrap, when set, wraps every socket dialed (before TLS).
	Wrap func(net.Conn) net.Conn
}

// Dialer dials one broker as its Config says. It is safe for concurrent
// use.
type Dialer struct {
	cfg  Config
	opts Options
	addr string // host:port
	tls  *tls.Config
}

// ErrPasswordInURL is returned by NewDialer for a URL that holds a
// password: it belongs in the password file.
var ErrPasswordInURL = errors.New("the stomp url holds a password: put it in password_file")

// NewDialer checks cfg (the URL parses, the TLS files load) without
// connecting.
func NewDialer(cfg Config, opts Options) (*Dialer, error) {
	addr, useTLS, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if u, err := url.Parse(cfg.URL); err == nil && cfg.User == "" && u.User != nil {
		cfg.User = u.User.Username() // stomp://user@host: the login, when user is not set
	}
	d := &Dialer{cfg: cfg, opts: opts, addr: addr}
	units.Default(&d.opts.Timeout, 10*time.Second)
	tc, err := cfg.TLS.ClientConfig()
	if err != nil {
		return nil, err
	}
	if useTLS {
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if tc.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			tc.ServerName = host
		}
		d.tls = tc
	}
	return d, nil
}

// ParseURL returns the host:port of a stomp:// or stomp+ssl:// URL (the
// scheme may also be ssl://, stomp+tls:// or stomps://; a bare host:port,
// as the shoveler takes it, is plain STOMP) and whether it uses TLS.
func ParseURL(raw string) (addr string, useTLS bool, err error) {
	if raw == "" {
		return "", false, errors.New("stomp url: empty")
	}
	if _, _, err := net.SplitHostPort(raw); err == nil && !bytes.Contains([]byte(raw), []byte("://")) {
		return raw, false, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", false, errors.New("stomp url: does not parse: want stomp://host:port or stomp+ssl://host:port")
	}
	if _, ok := u.User.Password(); ok {
		return "", false, ErrPasswordInURL
	}
	port := DefaultPort
	switch u.Scheme {
	case "stomp", "tcp":
	case "stomp+ssl", "stomp+tls", "stomps", "ssl":
		useTLS, port = true, DefaultTLSPort
	default:
		return "", false, fmt.Errorf("stomp url: scheme %q: want stomp or stomp+ssl", u.Scheme)
	}
	if u.Hostname() == "" {
		return "", false, errors.New("stomp url: no host")
	}
	if u.Port() != "" {
		port = u.Port()
	}
	return net.JoinHostPort(u.Hostname(), port), useTLS, nil
}

// URL returns the broker's address, for messages (the URL holds no
// password).
func (d *Dialer) URL() string { return d.cfg.URL }

// Dial connects and logs in, reading the password file now (so a rotated
// password is used). opts are added to the connection's options (after
// xrdmon's, so they win).
func (d *Dialer) Dial(ctx context.Context, opts ...func(*stomp.Conn) error) (*stomp.Conn, error) {
	var pass string
	if d.cfg.PasswordFile != "" {
		b, err := os.ReadFile(d.cfg.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("password file: %w", err)
		}
		pass = string(bytes.TrimSpace(b))
	}
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	nd := net.Dialer{Timeout: d.opts.Timeout}
	c, err := nd.DialContext(ctx, "tcp", d.addr)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", d.URL(), err)
	}
	if d.opts.Wrap != nil {
		c = d.opts.Wrap(c)
	}
	if err := c.SetDeadline(time.Now().Add(d.opts.Timeout)); err != nil {
		c.Close()
		return nil, fmt.Errorf("connect %s: %w", d.URL(), err)
	}
	if d.tls != nil {
		tc := tls.Client(c, d.tls.Clone())
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("connect %s: tls: %w", d.URL(), err)
		}
		c = tc
	}
	host := d.cfg.VHost
	if host == "" {
		host, _, _ = net.SplitHostPort(d.addr)
	}
	hb := d.cfg.Heartbeat.D()
	all := []func(*stomp.Conn) error{
		stomp.ConnOpt.Host(host),
		stomp.ConnOpt.HeartBeat(hb, hb),
		stomp.ConnOpt.Logger(quietLogger{}),
		// A batch of acknowledgements or sends is queued at once.
		stomp.ConnOpt.WriteChannelCapacity(1024),
		stomp.ConnOpt.ReadChannelCapacity(1024),
		// A shutdown waits this long at most for the DISCONNECT's receipt.
		stomp.ConnOpt.DisconnectReceiptTimeout(5 * time.Second),
	}
	if d.cfg.User != "" || pass != "" {
		all = append(all, stomp.ConnOpt.Login(d.cfg.User, pass))
	}
	if d.opts.ClientID != "" {
		all = append(all, stomp.ConnOpt.Header("client-id", d.opts.ClientID))
	}
	all = append(all, opts...)
	conn, err := stomp.ConnectWithContext(ctx, c, all...)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("connect %s: %w", d.URL(), err)
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		_ = conn.MustDisconnect()
		return nil, fmt.Errorf("connect %s: %w", d.URL(), err)
	}
	return conn, nil
}

// quietLogger drops the library's log lines: xrdmon logs the errors the
// library returns, once per outage.
type quietLogger struct{}

func (quietLogger) Debugf(string, ...any)   {}
func (quietLogger) Debug(string)            {}
func (quietLogger) Infof(string, ...any)    {}
func (quietLogger) Info(string)             {}
func (quietLogger) Warningf(string, ...any) {}
func (quietLogger) Warning(string)          {}
func (quietLogger) Errorf(string, ...any)   {}
func (quietLogger) Error(string)            {}
