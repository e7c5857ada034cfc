package bench

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNullReceiver sends datagrams over loopback and checks the null
// receiver counts every one, and its count file.
func TestNullReceiver(t *testing.T) {
	const n, size = 5000, 300
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := ListenNull("127.0.0.1:0", 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rcvbuf <= 0 {
		t.Errorf("receive buffer %d", r.Rcvbuf)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	c, err := net.DialUDP("udp", nil, r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := bytes.Repeat([]byte("x"), size)
	for i := range n {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if i%500 == 499 { // let the receiver keep up, whatever the machine's load
			waitCount(t, r, int64(i+1))
		}
	}
	waitCount(t, r, n)
	if p, b := r.Counts(); p != n || b != n*size {
		t.Errorf("counts %d packets, %d bytes; want %d, %d", p, b, n, n*size)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}

	// The child-process form writes its count to a file.
	countFile := filepath.Join(t.TempDir(), nullCountFile)
	ctx2, cancel2 := context.WithCancel(context.Background())
	u, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := u.LocalAddr().String()
	u.Close()
	done2 := make(chan error, 1)
	go func() { done2 <- RunNullReceiver(ctx2, addr, countFile, 1<<20) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := readNullCount(countFile); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no count file")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c2, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	for range 10 {
		if _, err := c2.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	for {
		if got, _ := readNullCount(countFile); got == 10 {
			break
		}
		if time.Now().After(deadline) {
			got, _ := readNullCount(countFile)
			t.Fatalf("count file says %d, want 10", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel2()
	if err := <-done2; err != nil {
		t.Errorf("RunNullReceiver: %v", err)
	}
	if got, ok := readNullCount(countFile); !ok || got != 10 {
		t.Errorf("final count %d, %v; want 10", got, ok)
	}
}

func waitCount(t *testing.T, r *NullReceiver, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, _ := r.Counts()
		if p >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %d datagrams, want %d", p, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNullRowsTable(t *testing.T) {
	rows := []Row{{Step: "rate=150000", Value: 150000, Servers: 4, Clients: 16, Sent: 3000000, Offered: 149990, Null: true,
		Received: 2999000, Accepted: 149940, KernelDrops: 1000, LossPct: 0.033, CPUPer100k: 0.25, PeakRSS: 30 << 20, SenderCPUPer100k: 0.5}}
	var tb bytes.Buffer
	WriteTable(&tb, rows, true)
	lines := strings.Split(strings.TrimSpace(tb.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "received") || strings.Contains(lines[0], "expected") || strings.Contains(lines[0], "latency") {
		t.Fatalf("null table:\n%s", tb.String())
	}
	var cb bytes.Buffer
	if err := WriteCSV(&cb, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cb.String(), strings.Join(NullColumns, ",")+"\n") {
		t.Errorf("csv header: %q", strings.SplitN(cb.String(), "\n", 2)[0])
	}
	back, err := ReadCSV(&cb)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 1 || !back[0].Null || back[0].Received != 2999000 || back[0].Accepted != 149940 || back[0].KernelDrops != 1000 ||
		back[0].SenderCPUPer100k != 0.5 || back[0].Value != 150000 {
		t.Errorf("ReadCSV: %+v", back)
	}
}
