package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/loadgen"
)

func TestLoadgenCommand(t *testing.T) {
	dir := t.TempDir()
	pcap, jsonl, truth := filepath.Join(dir, "c.pcap"), filepath.Join(dir, "c.jsonl"), filepath.Join(dir, "truth.json")
	var stdout, stderr bytes.Buffer
	err := runLoadgen(context.Background(), []string{"--servers", "2", "--clients", "4", "--duration", "2m",
		"--restarts", "1", "--loss", "0.05", "--pcap", pcap, "--jsonl", jsonl, "--truth", truth}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("loadgen: %v\n%s", err, stderr.String())
	}
	f, err := os.Open(truth)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := loadgen.ReadTruth(f)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Generated == 0 || tr.Dropped == 0 || len(tr.Servers) != 2 || len(tr.Records) == 0 {
		t.Errorf("truth: %d generated, %d dropped, %d servers, %d records", tr.Generated, tr.Dropped, len(tr.Servers), len(tr.Records))
	}
	for _, p := range []string{pcap, jsonl} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", p, err)
		}
	}
	if !bytes.Contains(stderr.Bytes(), []byte("packets generated")) {
		t.Errorf("no summary on stderr: %q", stderr.String())
	}

	for _, args := range [][]string{{"--bogus"}, {"--servers", "0"}, {"extra"}, {"--epoch", "yesterday"}} {
		if err := runLoadgen(context.Background(), args, &stdout, &stderr); !errors.Is(err, errUsage) {
			t.Errorf("%v: got %v, want a usage error", args, err)
		}
	}
}

func TestLoadgenPregenerate(t *testing.T) {
	ln, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_ = ln.SetReadBuffer(8 << 20)
	var stdout, stderr bytes.Buffer
	err = runLoadgen(context.Background(), []string{"--udp", ln.LocalAddr().String(), "--pregenerate", "--rate", "20000",
		"--count", "2000", "--duration", "0", "--no-truth-records"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("loadgen: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"pregenerated 2000 packets", "sending: 2000 datagrams", "2000 emitted"} {
		if !bytes.Contains(stderr.Bytes(), []byte(want)) {
			t.Errorf("summary lacks %q:\n%s", want, stderr.String())
		}
	}
	buf := make([]byte, 65536)
	for i := range 2000 {
		_ = ln.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := ln.ReadFromUDP(buf); err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
	}
	for _, args := range [][]string{{"--pregenerate"}, {"--pregenerate", "--udp", "127.0.0.1:9", "--jsonl", "x"}} {
		if err := runLoadgen(context.Background(), args, &stdout, &stderr); !errors.Is(err, errUsage) {
			t.Errorf("%v: got %v, want a usage error", args, err)
		}
	}
}
