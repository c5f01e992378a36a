package dataset

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/baton-dev/baton/internal/store/storetest"
)

// driver opens the data database anew for one test; more handles on the same database stand for
// other processes.
type driver struct {
	name string
	open func(t testing.TB) (db *DB, another func() *DB)
}

var drivers = []driver{{"sqlite", openSQLiteTest}, {"postgres", openPostgresTest}}

// forEachDriver runs fn as a parallel subtest per driver, on a database of its own.
func forEachDriver(t *testing.T, fn func(t *testing.T, db *DB, another func() *DB)) {
	t.Helper()
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db, another := d.open(t)
			fn(t, db, another)
		})
	}
}

func openTest(t testing.TB, url string) *DB {
	t.Helper()
	db, err := Open(context.Background(), url)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func openSQLiteTest(t testing.TB) (*DB, func() *DB) {
	path := filepath.Join(t.TempDir(), "data.db")
	return openTest(t, path), func() *DB { return openTest(t, "sqlite://"+path) }
}

// openPostgresTest skips the test when BATON_TEST_POSTGRES_URL is unset.
func openPostgresTest(t testing.TB) (*DB, func() *DB) {
	url := storetest.NewPostgresDatabase(t).URL
	return openTest(t, url), func() *DB { return openTest(t, url) }
}

// tableColumns lists the columns of the dataset's table, in order.
func tableColumns(t testing.TB, db *DB, datasetUUID string) []string {
	t.Helper()
	q := `SELECT name FROM pragma_table_info(?) ORDER BY cid`
	if _, ok := db.b.(*postgres); ok {
		q = `SELECT column_name::text FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position`
	}
	return queryStrings(t, db, q, TableName(datasetUUID))
}

// tableIndexes lists the names of the indexes of the dataset's table, sorted.
func tableIndexes(t testing.TB, db *DB, datasetUUID string) []string {
	t.Helper()
	q := `SELECT name FROM pragma_index_list(?) WHERE origin = 'c'`
	if _, ok := db.b.(*postgres); ok {
		q = `SELECT indexname::text FROM pg_indexes WHERE tablename = $1 AND indexname NOT LIKE '%\_pkey' AND indexname NOT LIKE '%\_key'`
	}
	names := queryStrings(t, db, q, TableName(datasetUUID))
	slices.Sort(names)
	return names
}

func queryStrings(t testing.TB, db *DB, q string, args ...any) []string {
	t.Helper()
	rows, err := db.b.reader().query(context.Background(), q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
