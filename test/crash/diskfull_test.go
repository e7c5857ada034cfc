//go:build crash

package crash

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// mountSmall mounts a file system of size bytes on dir: a tmpfs, else an
// ext4 image on a loop device. It returns what it mounted; both are
// unmounted at the end of the test. Without either (not root, no loop
// devices) the test is skipped: the store's max_bytes limit is not a
// substitute, since it deletes delivered records instead of refusing writes.
func mountSmall(t *testing.T, dir string, size int64) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	umount := func() {
		if _, err := run("umount", dir); err != nil {
			_, _ = run("umount", "-l", dir)
		}
	}
	_, errTmpfs := run("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "xrdmon-crash", dir)
	if errTmpfs == nil {
		t.Cleanup(umount)
		return fmt.Sprintf("tmpfs of %d MiB", size>>20)
	}
	img := filepath.Join(t.TempDir(), "store.img")
	f, err := os.Create(img)
	if err == nil {
		err = f.Truncate(size)
		f.Close()
	}
	if err == nil {
		_, err = run("mkfs.ext4", "-q", "-F", img)
	}
	if err == nil {
		_, err = run("mount", "-o", "loop", img, dir)
	}
	if err != nil {
		testenv.Unavailable(t, fmt.Sprintf("cannot mount a small file system for the store (tmpfs: %v; loop ext4: %v)", errTmpfs, err))
	}
	t.Cleanup(umount)
	return fmt.Sprintf("ext4 image of %d MiB on a loop device", size>>20)
}

// fill writes path until the file system has no space left and returns
// the bytes written.
func fill(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("create filler: %v", err)
	}
	defer f.Close()
	var n int64
	for _, chunk := range []int{1 << 20, 4096} {
		buf := make([]byte, chunk)
		for {
			w, err := f.Write(buf)
			n += int64(w)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatalf("write filler: %v", err)
			}
		}
	}
	return n
}

func readyz(c *collector) int {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + c.http + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestDiskFull is issue "Nothing lost", part (d): the file system of the
// store fills up while the collector consumes from RabbitMQ. The collector
// logs a clear error, stops acknowledging (the messages stay in the queue),
// keeps running, and when space returns it stores everything; the database
// passes PRAGMA integrity_check.
func TestDiskFull(t *testing.T) {
	url := testenv.AMQPURL(t)
	t0 := time.Now()
	mnt := filepath.Join(t.TempDir(), "store")
	fs := mountSmall(t, mnt, 64<<20)
	dir := filepath.Join(mnt, "data")

	q := testenv.Uniq("xrdmon-crash-full")
	cfg := loadgen.DefaultConfig()
	cfg.Servers, cfg.Clients, cfg.Users = 60, 16, 1000
	cfg.Duration = 20 * time.Minute
	cfg.Seed = 41
	truth := publish(t, url, cfg, q)

	logPath := filepath.Join(t.TempDir(), "collector.log")
	c := startCollector(t, dir, logPath, "--listen.udp=", "--amqp_input.enabled=true", "--amqp_input.url="+url,
		"--amqp_input.queue="+q, "--amqp_input.exchange=-", "--amqp_input.prefetch=2000")
	if !waitFor(30*time.Second, 100*time.Millisecond, func() bool {
		m, err := c.metrics()
		return err == nil && m["xrdmon_store_records_appended_total"] > 1000
	}) {
		t.Fatalf("no records stored after 30 s\n%s", tail(logPath, 20))
	}

	// Fill the disk.
	filler := filepath.Join(mnt, "filler")
	tFull := time.Now()
	filled := fill(t, filler)
	if !waitFor(90*time.Second, 100*time.Millisecond, func() bool {
		m, err := c.metrics()
		return err == nil && (m["xrdmon_store_full_total"] > 0 || m["xrdmon_pipeline_commit_errors_total"] > 0)
	}) {
		t.Fatalf("the store never reported a full disk (queue has %d ready)\n%s", queueDepth(t, url, q), tail(logPath, 20))
	}
	sawFull := time.Since(tFull)
	// While full: nothing stored, nothing acknowledged, not ready, running.
	time.Sleep(2 * time.Second)
	ready1, app1 := queueDepth(t, url, q), c.metric("xrdmon_store_records_appended_total")
	time.Sleep(5 * time.Second)
	ready2, app2 := queueDepth(t, url, q), c.metric("xrdmon_store_records_appended_total")
	if ready1 != ready2 || app1 != app2 {
		t.Errorf("while the disk is full: queue %d -> %d ready, records appended %v -> %v; want no change", ready1, ready2, app1, app2)
	}
	if ready2 == 0 {
		t.Errorf("the queue drained while the disk was full")
	}
	if code := readyz(c); code == http.StatusOK {
		t.Errorf("/readyz answers %d while the store cannot commit", code)
	}
	if !c.running() {
		t.Fatalf("collector exited on a full disk: %v\n%s", c.err, tail(logPath, 30))
	}
	errLines := grepLog(logPath, `"level":"ERROR"`, "Store full")
	if len(errLines) == 0 {
		t.Errorf("no ERROR log line about the full store; log:\n%s", tail(logPath, 20))
	}
	m, _ := c.metrics()
	commitErrors := m["xrdmon_pipeline_commit_errors_total"]
	if m["xrdmon_store_full_total"] == 0 {
		t.Errorf("xrdmon_store_full_total is 0 after %v failed commits on a full disk", commitErrors)
	}

	// Free the space: everything is stored.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	tFree := time.Now()
	fullFor := tFree.Sub(tFull)
	waitDrained(t, c, url, q, 3*time.Minute)
	recovered := time.Since(tFree)
	if code := readyz(c); code != http.StatusOK {
		t.Errorf("/readyz answers %d after recovery", code)
	}
	if err := c.stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, tail(logPath, 20))
	}
	if n := queueDepth(t, url, q); n != 0 {
		t.Errorf("%d messages left unacknowledged", n)
	}
	if ic := integrityCheck(t, dir); ic != "ok" {
		t.Errorf("integrity_check: %s", ic)
	}
	recs, _ := storeContents(t, dir)
	if len(recs) != len(truth.Records) {
		t.Errorf("store has %d records, truth %d", len(recs), len(truth.Records))
	}
	checkTruth(t, recs, truth)
	var first string
	if len(errLines) > 0 {
		first = errLines[0]
	}
	t.Logf("RESULT diskfull: %s; %d messages; filler %d MiB; full reported %s after filling; disk full for %s with %d messages held in the queue and %v records stored before; commit errors %v, xrdmon_store_full_total %v; recovered (queue drained) %s after freeing; records %d (truth %d); integrity ok; test %s",
		fs, truth.Emitted, filled>>20, sawFull.Round(100*time.Millisecond), fullFor.Round(100*time.Millisecond), ready2, app2, commitErrors, m["xrdmon_store_full_total"],
		recovered.Round(100*time.Millisecond), len(recs), len(truth.Records), time.Since(t0).Round(time.Second))
	t.Logf("RESULT diskfull: logged: %s", first)
}
