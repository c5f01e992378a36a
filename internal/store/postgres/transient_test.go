package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestTransient(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("update: %w", &pgconn.PgError{Code: code}) }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"deadlock", pg("40P01"), true},
		{"serialization failure", pg("40001"), true},
		{"backend terminated", pg("57P01"), true},
		{"crash shutdown", pg("57P02"), true},
		{"starting up", pg("57P03"), true},
		{"too many connections", pg("53300"), true},
		{"connection failure", pg("08006"), true},
		{"unique violation", pg("23505"), false},
		{"syntax error", pg("42601"), false},
		{"connection attempt failed", &pgconn.ConnectError{}, true},
		{"connection refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"eof", io.ErrUnexpectedEOF, true},
		{"bad conn", driver.ErrBadConn, true},
		{"conn done", sql.ErrConnDone, true},
		{"conn closed", pgconn.ErrConnClosed, true},
		{"no rows", sql.ErrNoRows, false},
		{"canceled", context.Canceled, false},
		{"plain", errors.New("boom"), false},
	}
	for _, tt := range tests {
		if got := transient(tt.err); got != tt.want {
			t.Errorf("%s: transient(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
