package storetest

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/baton-dev/baton/internal/store"
)

// ErrInjected is the transient failure a Faulty store injects.
var ErrInjected = errors.New("injected fault: the connection to the database was lost")

// Faulty is a real store whose next transactions fail as if the database had dropped the
// connection: FailCommit of them after their work committed (the answer lost on the way back),
// then FailBegin of them before their work runs. Transient reports the injected failure.
type Faulty struct {
	store.Store
	FailCommit, FailBegin atomic.Int32
	Txs                   atomic.Int32 // transactions begun
}

// InTx implements store.Store.
func (s *Faulty) InTx(ctx context.Context, fn func(store.Tx) error) error {
	s.Txs.Add(1)
	if s.FailCommit.Add(-1) >= 0 {
		if err := s.Store.InTx(ctx, fn); err != nil {
			return err
		}
		return ErrInjected
	}
	if s.FailBegin.Add(-1) >= 0 {
		return ErrInjected
	}
	return s.Store.InTx(ctx, fn)
}

// Transient implements store.Store.
func (s *Faulty) Transient(err error) bool {
	return errors.Is(err, ErrInjected) || s.Store.Transient(err)
}
