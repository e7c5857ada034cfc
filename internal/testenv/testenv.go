// Package testenv gives tests the services they run against: the
// RabbitMQ broker and the PostgreSQL database, found through the
// environment. A test whose service does not answer is skipped with the
// reason, or failed when CI=true (in CI every service must be there).
//
//	XRDMON_TEST_AMQP_URL  default amqp://guest:guest@127.0.0.1:5672/
//	XRDMON_TEST_PG_URL    default postgres://postgres@127.0.0.1:5432/test
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The environment variables naming the services, and their defaults.
const (
	AMQPEnv         = "XRDMON_TEST_AMQP_URL"
	AMQPDefault     = "amqp://guest:guest@127.0.0.1:5672/"
	PostgresEnv     = "XRDMON_TEST_PG_URL"
	PostgresDefault = "postgres://postgres@127.0.0.1:5432/test"
)

// AMQPURL returns the test broker's URL once an AMQP connection to it has
// succeeded.
func AMQPURL(tb testing.TB) string {
	tb.Helper()
	u := url(AMQPEnv, AMQPDefault)
	c, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		Unavailable(tb, "RabbitMQ at "+AMQPEnv+" ("+AMQPDefault+" by default) does not answer: "+err.Error())
	}
	c.Close()
	return u
}

// PostgresURL returns the test database's URL once a connection to it has
// succeeded.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	u := url(PostgresEnv, PostgresDefault)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		Unavailable(tb, "PostgreSQL at "+PostgresEnv+" ("+PostgresDefault+" by default) does not answer: "+err.Error())
	}
	c.Close(ctx)
	return u
}

// Unavailable skips the test because something it needs is missing, or
// fails it when the environment variable CI is "true".
func Unavailable(tb testing.TB, why string) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatal(why)
	}
	tb.Skip(why)
}

// Uniq returns prefix with a random suffix: a queue, exchange or schema
// name no other test (or run) uses.
func Uniq(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

func url(env, def string) string {
	if u := os.Getenv(env); u != "" {
		return u
	}
	return def
}

// ProcessCPU returns the CPU time (user and system) this process has used:
// what benchmarks and budget tests measure instead of wall time, which
// other work on the machine stretches.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
