package amqpconn

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTLSConfig(t *testing.T) {
	c, err := TLS{}.ClientConfig()
	if err != nil || c != nil {
		t.Fatalf("empty TLS: %v, %v", c, err)
	}
	c, err = TLS{Insecure: true}.ClientConfig()
	if err != nil || c == nil || !c.InsecureSkipVerify {
		t.Fatalf("insecure TLS: %v, %v", c, err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	_ = os.WriteFile(ca, []byte("not a pem"), 0o600)
	if _, err := (TLS{CA: ca}).ClientConfig(); err == nil || !strings.Contains(err.Error(), "no certificate") {
		t.Fatalf("bad CA accepted: %v", err)
	}
	if _, err := NewDialer(Config{URL: "amqp://127.0.0.1/", TLS: TLS{CA: "/nonexistent"}}, Options{}); err == nil {
		t.Fatal("NewDialer accepted a CA file that does not exist")
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"amqps://xrdmon:secret@broker.example.org:5671/osg": "amqps://xrdmon:xxxxx@broker.example.org:5671/osg",
		"amqp://broker/":         "amqp://broker/",
		"amqp://u:p@[::1:5672/x": "(unparsable URL)",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	if _, err := NewDialer(Config{URL: "amqp://u:topsecret@[::1:5672/x"}, Options{}); err == nil || strings.Contains(err.Error(), "topsecret") {
		t.Errorf("bad URL: %v", err)
	}
}

// TestTokenChanged: a token file's change is seen after a dial read it,
// not before, and a failed dial still records the token it used.
func TestTokenChanged(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("jwt\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := NewDialer(Config{URL: "amqp://127.0.0.1:1/", TokenFile: tok}, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if d.TokenChanged() {
		t.Fatal("changed before any dial")
	}
	if _, err := d.Dial(context.Background()); err == nil {
		t.Fatal("dialed a closed port")
	}
	if d.TokenChanged() {
		t.Fatal("changed right after the dial read it")
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(tok, later, later); err != nil {
		t.Fatal(err)
	}
	if !d.TokenChanged() {
		t.Fatal("a rewritten token file is not seen")
	}
	empty := filepath.Join(t.TempDir(), "empty")
	_ = os.WriteFile(empty, nil, 0o600)
	d2, _ := NewDialer(Config{URL: "amqp://127.0.0.1:1/", TokenFile: empty}, Options{})
	if _, err := d2.Dial(context.Background()); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty token: %v", err)
	}
}

func TestReadToken(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte("  eyJhbGciOi.payload.sig\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, _, err := readToken(p)
	if err != nil || tok != "eyJhbGciOi.payload.sig" {
		t.Fatalf("readToken = %q, %v", tok, err)
	}
	if err := os.WriteFile(p, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readToken(p); err == nil {
		t.Fatal("empty token file accepted")
	}
}
