package storetest_test

import (
	"database/sql"
	"os"
	"testing"

	"github.com/baton-dev/baton/internal/store/storetest"
)

func TestStartPostgresServerRunsWithItsSettingsAndLeavesNothing(t *testing.T) {
	t.Parallel()
	var dir string
	t.Run("server", func(t *testing.T) {
		srv := storetest.StartPostgresServer(t, "autovacuum=on", "autovacuum_naptime=7s")
		dir = srv.Dir
		pg := storetest.NewDatabaseAt(t, srv.URL)
		db, err := sql.Open("pgx", pg.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var autovacuum, naptime, database string
		if err := db.QueryRow(`SELECT current_setting('autovacuum'), current_setting('autovacuum_naptime'), current_database()`).
			Scan(&autovacuum, &naptime, &database); err != nil {
			t.Fatal(err)
		}
		if autovacuum != "on" || naptime != "7s" || database != pg.Name {
			t.Errorf("autovacuum %s, naptime %s, database %s; want on, 7s, %s", autovacuum, naptime, database, pg.Name)
		}
	})
	if dir == "" {
		return // skipped: no installation
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the server's directory %s is still there after the test (stat: %v)", dir, err)
	}
}
