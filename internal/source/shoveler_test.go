package source

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"testing"

	"github.com/xrdmon/xrdmon/internal/source/sourcetest"
)

func TestParseShovelerRealPackets(t *testing.T) {
	f, err := os.Open(sourcetest.RealPacketsPath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var n, v6 int
	var buf []byte
	for sc.Scan() {
		line := sc.Bytes()
		var want struct{ Remote, Version, Data string }
		if err := json.Unmarshal(line, &want); err != nil {
			t.Fatal(err)
		}
		wantData, _ := base64.StdEncoding.DecodeString(want.Data)
		var s Shoveled
		buf, s, err = AppendShoveler(buf[:0], line)
		if err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		if !bytes.Equal(s.Data, wantData) {
			t.Errorf("line %d: data differs", n+1)
		}
		if string(s.Remote) != want.Remote || string(s.Version) != want.Version {
			t.Errorf("line %d: remote %q version %q", n+1, s.Remote, s.Version)
		}
		if !s.Sender.IsValid() {
			t.Errorf("line %d: remote %q not parsed", n+1, s.Remote)
		}
		if s.Sender.Addr().Is6() {
			v6++
			if got := s.Sender.String(); got != "[2603:4000:c00:0:c:ffff:120c:1b1]:51729" {
				t.Errorf("unbracketed IPv6: got %s", got)
			}
		}
		n++
	}
	if n != 11 || v6 != 2 {
		t.Errorf("parsed %d packets, %d IPv6; want 11, 2", n, v6)
	}
}

func TestParseShovelerRemote(t *testing.T) {
	data := base64.StdEncoding.EncodeToString([]byte("hello"))
	tests := []struct {
		name, remote string
		want         string // Sender.String(); "" for host
		host         string
		port         uint16
		err          error
	}{
		{"ipv4", "192.0.2.7:9930", "192.0.2.7:9930", "", 9930, nil},
		{"bracketed v6", "[2001:db8::1]:51729", "[2001:db8::1]:51729", "", 51729, nil},
		{"unbracketed v6", "2001:db8::1:51729", "[2001:db8::1]:51729", "", 51729, nil},
		{"v4-mapped", "[::ffff:192.0.2.7]:1", "192.0.2.7:1", "", 1, nil},
		{"host", "xrd.example.org:1094", "", "xrd.example.org", 1094, nil},
		{"ip no port", "192.0.2.7", "192.0.2.7:0", "", 0, nil},
		{"empty", "", "", "", 0, ErrShovelerRemote},
		{"bad port", "192.0.2.7:99999", "", "", 0, ErrShovelerRemote},
		{"junk", "a b:1", "", "", 0, ErrShovelerRemote},
		{"unclosed bracket", "[2001:db8::1:5", "", "", 0, ErrShovelerRemote},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, _ := json.Marshal(map[string]string{"remote": tt.remote, "version": "x", "data": data})
			s, err := ParseShoveler(line)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if tt.want != "" && s.Sender.String() != tt.want {
				t.Errorf("sender = %s, want %s", s.Sender, tt.want)
			}
			if string(s.Host) != tt.host || s.Port != tt.port {
				t.Errorf("host %q port %d, want %q %d", s.Host, s.Port, tt.host, tt.port)
			}
			if string(s.Data) != "hello" {
				t.Errorf("data = %q", s.Data)
			}
		})
	}
}

func TestParseShovelerJSON(t *testing.T) {
	tests := []struct {
		name, line, data string
		err              error
	}{
		{"plain", `{"remote":"1.2.3.4:5","version":"v","data":"aGVsbG8="}`, "hello", nil},
		{"spaces and order", " { \"data\" : \"aGVsbG8=\" ,\n \"remote\":\"1.2.3.4:5\" } ", "hello", nil},
		{"unpadded", `{"remote":"1.2.3.4:5","data":"aGVsbG8"}`, "hello", nil},
		{"escaped slash", `{"remote":"1.2.3.4:5","data":"P\/8="}`, "?\xff", nil},
		{"unknown fields", `{"x":{"a":[1,"}",{}]},"n":1.5,"b":true,"z":null,"remote":"1.2.3.4:5","data":"aGVsbG8="}`, "hello", nil},
		{"null version", `{"remote":"1.2.3.4:5","version":null,"data":"aGVsbG8="}`, "hello", nil},
		{"no data", `{"remote":"1.2.3.4:5"}`, "", ErrShovelerData},
		{"empty object", `{}`, "", ErrShovelerData},
		{"bad base64", `{"remote":"1.2.3.4:5","data":"!!!!"}`, "", ErrShovelerData},
		{"not json", `hello`, "", ErrShovelerSyntax},
		{"truncated", `{"remote":"1.2.3.4:5","data":"aGVs`, "", ErrShovelerSyntax},
		{"missing colon", `{"remote" "1.2.3.4:5"}`, "", ErrShovelerSyntax},
		{"no remote", `{"data":"aGVsbG8="}`, "", ErrShovelerRemote},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseShoveler([]byte(tt.line))
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err == nil && string(s.Data) != tt.data {
				t.Errorf("data = %q, want %q", s.Data, tt.data)
			}
		})
	}
}

func TestAppendShovelerAppends(t *testing.T) {
	line := []byte(`{"remote":"1.2.3.4:5","data":"aGVsbG8="}`)
	buf := []byte("ab")
	buf, s, err := AppendShoveler(buf, line)
	if err != nil {
		t.Fatal(err)
	}
	if string(buf) != "abhello" || string(s.Data) != "hello" {
		t.Errorf("buf %q data %q", buf, s.Data)
	}
	if want := netip.MustParseAddrPort("1.2.3.4:5"); s.Sender != want {
		t.Errorf("sender %v", s.Sender)
	}
}

func TestAppendShovelerNoAllocs(t *testing.T) {
	line := []byte(`{"remote":"[2001:db8::1]:51729","version":"v1.4.0","data":"ZPIBDGg9+SQAgULaaHR0cHMvdW5rbm93bi4zMjQxODQ6MjU4MzA1OTk3MjQ1MTg0QFs6OjE5OC4xMjQuMjM5LjEwXQovbmNhcg=="}`)
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if _, _, err = AppendShoveler(buf[:0], line); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("AppendShoveler allocates %v times per message", allocs)
	}
}

// TestShovelerOversized: a message whose datagram would exceed 65,535 bytes,
// or a message longer than its base64 could be, is ErrShovelerOversized.
func TestShovelerOversized(t *testing.T) {
	env := func(n int) []byte {
		return []byte(`{"remote":"192.0.2.1:1094","data":"` + base64.StdEncoding.EncodeToString(make([]byte, n)) + `"}`)
	}
	if p, err := ParseShoveler(env(MaxDatagram)); err != nil || len(p.Data) != MaxDatagram {
		t.Fatalf("a %d-byte datagram: %v", MaxDatagram, err)
	}
	for _, line := range [][]byte{env(MaxDatagram + 1), env(10 << 20), append(env(10), make([]byte, MaxShovelerMessage)...)} {
		if _, err := ParseShoveler(line); !errors.Is(err, ErrShovelerOversized) || ShovelerReason(err) != "oversized" {
			t.Errorf("%d-byte message: %v, want oversized", len(line), err)
		}
	}
}
