package wire

import (
	"encoding/json"
	"time"
)

// The Buffer Queue as a sink speaks it, on the internal listener: claim messages, extend the
// claim of each while loading it, then commit or fail each.

// SinkClaimRequest is the body of POST /internal/sink/claim; every member is optional.
type SinkClaimRequest struct {
	Max               int   `json:"max,omitempty"`                // at most this many messages (default 1, at most 100)
	ID                int64 `json:"id,omitempty"`                 // only this message (after a wake-up naming it)
	VisibilitySeconds int   `json:"visibility_seconds,omitempty"` // how long they stay the caller's
	WaitSeconds       int   `json:"wait_seconds,omitempty"`       // wait up to this long (at most 30) for one
}

// SinkClaim is the answer of POST /internal/sink/claim.
type SinkClaim struct {
	Messages []SinkMessage `json:"messages"`
}

// SinkMessage is a claimed Buffer Queue message: the buffer_batch message itself, the receive
// count (the receipt of an extend or a fail), and the dataset it loads into, all from trusted
// records.
type SinkMessage struct {
	ID           int64           `json:"id"`
	ReceiveCount int             `json:"receive_count"`
	VisibleUntil time.Time       `json:"visible_until"`
	Message      json.RawMessage `json:"message"`
	OrgID        string          `json:"org_id"`
	BatchURI     string          `json:"batch_uri"`
	Dataset      SinkDataset     `json:"dataset"`
}

// SinkDataset is the dataset a claimed message loads into; Schema is its row schema as deployed.
type SinkDataset struct {
	UUID         string          `json:"dataset_uuid"`
	Name         string          `json:"name"`
	Schema       json.RawMessage `json:"schema"`
	FilterFields []string        `json:"filter_fields"`
}

// SinkExtend is the body of POST /internal/sink/extend: keep message id, received as
// receive_count, the caller's for visibility_seconds (1 to 3600) more from now.
type SinkExtend struct {
	ID                int64 `json:"id"`
	ReceiveCount      int   `json:"receive_count"`
	VisibilitySeconds int   `json:"visibility_seconds"`
}

// SinkCommit is the body of POST /internal/sink/commit: what loading message id did.
type SinkCommit struct {
	ID       int64            `json:"id"`
	Cursor   int64            `json:"cursor"`
	Inserted int              `json:"inserted"`
	Facets   map[string][]any `json:"facets,omitempty"`
}

// SinkFail is the body of POST /internal/sink/fail.
type SinkFail struct {
	ID           int64  `json:"id"`
	ReceiveCount int    `json:"receive_count"`
	Error        string `json:"error"`
}

// SinkFailed is the answer of POST /internal/sink/fail: whether the message was dead-lettered.
type SinkFailed struct {
	OK   bool `json:"ok"`
	Dead bool `json:"dead"`
}
