package postgres_test

import (
	"testing"

	"github.com/baton-dev/baton/internal/store/storetest"
)

func TestContract(t *testing.T) { storetest.Run(t, storetest.OpenPostgres) }
