package store

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ErrLocked is returned by Open when another process has the store open for
// writing. Two writers on one store would both fail every append.
var ErrLocked = errors.New("store is in use by another process")

// lockFile is an exclusive advisory lock (flock) on PATH.lock beside the
// database, held by the one process that writes the store. The kernel
// releases it when the process dies, so a kill -9 leaves no stale lock.
// Readers (Reader) do not take it.
type lockFile struct{ f *os.File }

// lockStore takes the writer's lock of the database at path, or returns
// ErrLocked naming the process that holds it.
func lockStore(path string) (*lockFile, error) {
	name := path + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(name); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = fmt.Sprintf(" (pid %d)", pid)
			}
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w%s: %s is locked; run one collector per data directory", ErrLocked, holder, name)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	// The pid is for the message above only; the lock is the flock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &lockFile{f: f}, nil
}

// unlock releases the lock. The file stays: removing it would let a third
// process lock a new file while a second still waits on the old one.
func (l *lockFile) unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor releases the flock
	l.f = nil
	return err
}
