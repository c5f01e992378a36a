package store

import (
	"context"
	"encoding/json"
	"time"
)

// QueryAudit is one query of the Query Service as the audit trail keeps it: who ran it, a hash
// of its SQL, the dataset versions it read, and how it ended. Never the SQL or a value it read.
type QueryAudit struct {
	ID     int64
	Tenant string
	At     time.Time // when it started
	// Caller is "key:{api key id}" for a query with an API key, "task:{task id}/{attempt}" for a
	// task's.
	Caller  string
	SQLHash string // hex SHA-256 of the SQL text
	// Datasets are the dataset versions it read: [{"uuid","name","version"}].
	Datasets json.RawMessage
	// Status is ok, or why it did not answer: rejected (the gate), forbidden, not_found,
	// not_readable, too_large, timeout, busy, failed (the statement), error (Baton).
	Status     string
	RowCount   int
	DurationMS int64
}

// QueryAuditListParams selects a page of a tenant's query audit, newest first.
type QueryAuditListParams struct {
	Tenant   string
	BeforeID int64 // only records with ID < BeforeID; 0: from the newest
	Limit    int
}

// QueryAuditReader reads the query audit.
type QueryAuditReader interface {
	QueryAuditList(ctx context.Context, p QueryAuditListParams) ([]*QueryAudit, error)
}

// QueryAuditWriter writes the query audit, inside a Tx.
type QueryAuditWriter interface {
	// QueryAuditInsert stores a record and sets its ID.
	QueryAuditInsert(ctx context.Context, a *QueryAudit) error
}
