package staging_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/dataplane/staging"
)

// Rule: without object storage (a nil *blob.Store included) the collector runs nothing, whatever
// its retention.
func TestCollectorWithoutObjectStorageRunsNothing(t *testing.T) {
	for name, b := range map[string]staging.Blob{"nil": nil, "nil *blob.Store": (*blob.Store)(nil)} {
		c := staging.New(staging.Config{Retention: time.Hour}, staging.Deps{Blob: b,
			ReplaceOutputs: func(context.Context) ([]string, error) {
				t.Errorf("%s: the replace outputs were listed", name)
				return nil, nil
			}})
		if n, err := c.RunOnce(t.Context()); err != nil || n != (staging.Pass{}) {
			t.Errorf("%s: RunOnce: %+v, %v; want nothing", name, n, err)
		}
		if err := c.Start(t.Context()); err != nil {
			t.Errorf("%s: Start: %v", name, err)
		}
		c.Stop()
	}
}
