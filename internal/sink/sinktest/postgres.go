package sinktest

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

// PostgresSchema returns a unique schema name, dropped at cleanup.
func PostgresSchema(tb testing.TB, u string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("xrdmon_test_%x", b)
	tb.Cleanup(func() {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, u)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
	})
	return name
}

// PostgresValue runs a one-value query on a fresh connection to u.
func PostgresValue[T any](tb testing.TB, u, q string, args ...any) T {
	tb.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close(ctx)
	var v T
	if err := c.QueryRow(ctx, q, args...).Scan(&v); err != nil {
		tb.Fatalf("%s: %v", q, err)
	}
	return v
}
