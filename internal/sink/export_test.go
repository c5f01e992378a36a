package sink

import (
	"context"

	"github.com/baton-dev/baton/wire"
)

// SetLoadHook makes s run fn just before it loads a batch into the data database, with the load's
// context (canceled when the claim is lost), so that a test can make a load last as long as it
// needs.
func SetLoadHook(s *Sink, fn func(ctx context.Context, m wire.SinkMessage)) { s.loadHook = fn }
