package store

import (
	"context"
	"time"
)

// Workers keeps what workers say of themselves when they claim.
type Workers interface {
	// WorkerInfoPut records w, replacing what its worker said before.
	WorkerInfoPut(ctx context.Context, w *WorkerInfo) error
	// WorkerInfoList returns what the workers of ids said last; a worker that said nothing is
	// left out.
	WorkerInfoList(ctx context.Context, ids []string) ([]*WorkerInfo, error)
}

// WorkerInfo is what a worker said of itself when it last claimed.
type WorkerInfo struct {
	WorkerID string
	// Isolation is the level of containment its untrusted children get (none, limits,
	// landlock, seccomp, namespaces).
	Isolation string
	SeenAt    time.Time
}
