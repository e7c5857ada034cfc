package source

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestFilter(t *testing.T) {
	reg := prometheus.NewRegistry()
	f, err := NewFilter(FilterConfig{
		Allow: []string{"192.0.2.0/24", "2001:db8::/32", "198.51.100.7", "10.0.0.0/8", "203.0.113.9"},
		Map:   map[string]string{"10.0.0.5": "203.0.113.5", "xrd.example.org": "203.0.113.9"},
	}, "udp", reg)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in, want string // want "" = denied
	}{
		{"192.0.2.200:1", "192.0.2.200:1"},
		{"[::ffff:192.0.2.1]:2", "192.0.2.1:2"},
		{"[2001:db8::5]:3", "[2001:db8::5]:3"},
		{"198.51.100.7:4", "198.51.100.7:4"},
		{"198.51.100.8:4", ""},
		{"10.0.0.5:9930", "203.0.113.5:9930"},
		{"10.0.0.6:9930", "10.0.0.6:9930"},
		{"[2001:db9::5]:3", ""},
	}
	denied := 0
	for _, tt := range tests {
		got, ok := f.Accept(netip.MustParseAddrPort(tt.in))
		if tt.want == "" {
			denied++
			if ok {
				t.Errorf("%s accepted as %s, want denied", tt.in, got)
			}
			continue
		}
		if !ok || got.String() != tt.want {
			t.Errorf("%s -> %v %v, want %s", tt.in, got, ok, tt.want)
		}
	}
	if got := testutil.ToFloat64(f.denied); got != float64(denied) {
		t.Errorf("denied counter = %v, want %d", got, denied)
	}

	// Host names only pass through the map.
	if got, ok := f.AcceptHost([]byte("XRD.example.org"), 1094); !ok || got.String() != "203.0.113.9:1094" {
		t.Errorf("mapped host: %v %v", got, ok)
	}
	if _, ok := f.AcceptHost([]byte("other.example.org"), 1094); ok {
		t.Error("unmapped host accepted")
	}
	if got := testutil.ToFloat64(f.unresolved); got != 1 {
		t.Errorf("unresolved counter = %v", got)
	}

	// A second filter on the same registry shares the metric.
	if _, err := NewFilter(FilterConfig{}, "amqp", reg); err != nil {
		t.Fatalf("second filter: %v", err)
	}
}

func TestFilterEmptyAndMapAll(t *testing.T) {
	f, err := NewFilter(FilterConfig{}, "file", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := f.Accept(netip.MustParseAddrPort("[::ffff:1.2.3.4]:5")); !ok || got.String() != "1.2.3.4:5" {
		t.Errorf("empty filter: %v %v", got, ok)
	}
	f, err = NewFilter(FilterConfig{MapAll: "172.0.0.4"}, "file", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := f.Accept(netip.MustParseAddrPort("192.168.0.4:77")); !ok || got.String() != "172.0.0.4:77" {
		t.Errorf("map all: %v %v", got, ok)
	}
}

func TestFilterConfigErrors(t *testing.T) {
	_, err := NewFilter(FilterConfig{Allow: []string{"300.1.1.1/8", "x"}, Map: map[string]string{"1.2.3.4": "nope"}}, "udp", nil)
	if err == nil {
		t.Fatal("no error for bad config")
	}
	for _, want := range []string{"300.1.1.1/8", `"x"`, "nope"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestFilterAcceptNoAllocs(t *testing.T) {
	f, _ := NewFilter(FilterConfig{Allow: []string{"192.0.2.0/24"}, Map: map[string]string{"192.0.2.1": "203.0.113.1"}}, "udp", nil)
	a := netip.MustParseAddrPort("192.0.2.1:9930")
	if n := testing.AllocsPerRun(100, func() { f.Accept(a) }); n != 0 {
		t.Errorf("Accept allocates %v", n)
	}
}

// TestFilterIPv6PrefixesAndIPv4Senders: IPv4 senders arrive unmapped, and
// are matched by IPv6 prefixes that cover the IPv4-mapped range: ::/0
// allows every sender, ::ffff:10.0.0.0/104 allows 10/8, and 2001:db8::/32
// no IPv4 sender.
func TestFilterIPv6PrefixesAndIPv4Senders(t *testing.T) {
	for _, tc := range []struct {
		allow   string
		sender  string
		allowed bool
	}{
		{"::/0", "192.0.2.1:1", true},
		{"::/0", "[::ffff:192.0.2.1]:1", true},
		{"::/0", "[2001:db8::1]:1", true},
		{"::ffff:10.0.0.0/104", "10.1.2.3:1", true},
		{"::ffff:10.0.0.0/104", "11.1.2.3:1", false},
		{"::ffff:0:0/96", "203.0.113.1:1", true},
		{"2001:db8::/32", "192.0.2.1:1", false},
		{"0.0.0.0/0", "[2001:db8::1]:1", false},
	} {
		f, err := NewFilter(FilterConfig{Allow: []string{tc.allow}}, "udp", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := f.Accept(netip.MustParseAddrPort(tc.sender)); ok != tc.allowed {
			t.Errorf("allow %s, sender %s: accepted %v, want %v", tc.allow, tc.sender, ok, tc.allowed)
		}
	}
}
