package stompconn

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xrdmon/xrdmon/internal/testenv"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url, addr string
		tls       bool
		err       string
	}{
		{"stomp://mq.example.org:61613", "mq.example.org:61613", false, ""},
		{"stomp://mq.example.org", "mq.example.org:61613", false, ""},
		{"stomp+ssl://mq.example.org", "mq.example.org:61614", true, ""},
		{"ssl://[2001:db8::1]:61123", "[2001:db8::1]:61123", true, ""},
		{"mq.example.org:61613", "mq.example.org:61613", false, ""}, // the shoveler's form
		{"stomp://xrdmon@mq.example.org", "mq.example.org:61613", false, ""},
		{"stomp://xrdmon:secret@mq.example.org", "", false, "password_file"},
		{"amqp://mq.example.org", "", false, "scheme"},
		{"stomp://", "", false, "no host"},
		{"", "", false, "empty"},
	} {
		addr, useTLS, err := ParseURL(tc.url)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one about %q", tc.url, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("%q: the error shows the password: %v", tc.url, err)
			}
			continue
		}
		if err != nil || addr != tc.addr || useTLS != tc.tls {
			t.Errorf("%q: %q tls %v (%v), want %q tls %v", tc.url, addr, useTLS, err, tc.addr, tc.tls)
		}
	}
	if _, _, err := ParseURL("stomp://a:b@h"); !errors.Is(err, ErrPasswordInURL) {
		t.Errorf("password in URL: %v", err)
	}
}

// TestPasswordFile: the passcode comes from the file, read at every dial:
// a wrong one is refused by the broker, the right one (written later into
// the same file) is taken.
func TestPasswordFile(t *testing.T) {
	u, user, _ := testenv.RabbitSTOMP(t)
	pf := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pf, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := NewDialer(Config{URL: u, User: user, PasswordFile: pf, VHost: "/"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := d.Dial(context.Background()); err == nil {
		_ = c.Disconnect()
		t.Fatal("the broker took a wrong password")
	}
	if err := os.WriteFile(pf, []byte("guest\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := d.Dial(context.Background())
	if err != nil {
		t.Fatalf("dial with the password file's new content: %v", err)
	}
	_ = c.Disconnect()
}
