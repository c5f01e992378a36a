package store_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The rolling-upgrade rule: while replicas are replaced one at a time, the previous release's
// binary keeps running against the schema the new release's migrations made. So a migration's Up
// only expands — new tables, new nullable or defaulted columns, new non-unique indexes — and the
// contract steps (dropping or renaming what the old code uses, changing a column's type,
// tightening a constraint) wait for a later release, when no running binary uses the old shape.
// A statement that looks like a contract step but is safe says why in a comment in it or right
// above it: `-- rolling-upgrade: safe because <reason>`.

// contractRules are the statement shapes that can break the previous release's binary.
var contractRules = []struct {
	re   *regexp.Regexp
	what string
}{
	{regexp.MustCompile(`\bDROP\s+(TABLE|VIEW|MATERIALIZED\s+VIEW|INDEX|SEQUENCE|FUNCTION|TRIGGER|TYPE|SCHEMA)\b`), "drops an object the previous release may use"},
	{regexp.MustCompile(`\bDROP\s+COLUMN\b`), "drops a column the previous release may read or write"},
	{regexp.MustCompile(`\bDROP\s+CONSTRAINT\b`), "drops a constraint (or the index behind it) the previous release may rely on"},
	{regexp.MustCompile(`\bDROP\s+DEFAULT\b`), "drops a default the previous release's inserts may rely on"},
	{regexp.MustCompile(`\bRENAME\b`), "renames what the previous release knows by its old name"},
	{regexp.MustCompile(`\bALTER\s+(COLUMN\s+)?\S+\s+(SET\s+DATA\s+)?TYPE\b`), "changes a column's type"},
	{regexp.MustCompile(`\bSET\s+NOT\s+NULL\b`), "makes a column NOT NULL: the previous release may write NULL"},
	{regexp.MustCompile(`\bADD\s+(CONSTRAINT|PRIMARY\s+KEY|UNIQUE|CHECK|FOREIGN\s+KEY)\b`), "tightens a table with a constraint the previous release's writes may break"},
	{regexp.MustCompile(`\bTRUNCATE\b`), "empties a table"},
}

var (
	addColumn   = regexp.MustCompile(`\bADD\s+(COLUMN\s+)?(IF\s+NOT\s+EXISTS\s+)?[A-Z_][A-Z0-9_]*\s`)
	notNull     = regexp.MustCompile(`\bNOT\s+NULL\b`)
	hasDefault  = regexp.MustCompile(`\bDEFAULT\b|\bGENERATED\b`)
	createTable = regexp.MustCompile(`\bCREATE\s+TABLE\s+(IF\s+NOT\s+EXISTS\s+)?([A-Z_][A-Z0-9_.]*)`)
	uniqueIndex = regexp.MustCompile(`\bCREATE\s+UNIQUE\s+INDEX\b.*?\bON\s+(ONLY\s+)?([A-Z_][A-Z0-9_.]*)`)
	safeMarker  = regexp.MustCompile(`rolling-upgrade:\s*safe because\s+\S+(\s+\S+){3,}`)
	gooseLine   = regexp.MustCompile(`^--\s*\+goose\s+(\S+)`)
)

// statement is one SQL statement of a migration's Up section.
type statement struct {
	line     int    // where it begins
	sql      string // comments removed, whitespace collapsed, upper case
	comments string // its own comments and those right above it
}

// upStatements splits a goose migration's Up section into statements; the Down section is not
// run on an upgrade and is left out.
func upStatements(src string) ([]statement, error) {
	var (
		out      []statement
		up, seen bool
		block    bool // between StatementBegin and StatementEnd
		cur      strings.Builder
		comments strings.Builder
		start    int
	)
	flush := func() {
		if s := strings.Join(strings.Fields(cur.String()), " "); s != "" {
			out = append(out, statement{line: start, sql: strings.ToUpper(s), comments: comments.String()})
		}
		cur.Reset()
		comments.Reset()
		start = 0
	}
	for i, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if m := gooseLine.FindStringSubmatch(trimmed); m != nil {
			switch m[1] {
			case "Up":
				up, seen = true, true
			case "Down":
				flush()
				up = false
			case "StatementBegin":
				block = true
			case "StatementEnd":
				block = false
				if up {
					flush()
				}
			}
			continue
		}
		if !up {
			continue
		}
		code, comment, _ := strings.Cut(line, "--")
		comments.WriteString(comment + "\n")
		if strings.TrimSpace(code) == "" {
			continue
		}
		if start == 0 {
			start = i + 1
		}
		cur.WriteString(code + "\n")
		if !block && strings.HasSuffix(strings.TrimSpace(code), ";") {
			flush()
		}
	}
	if !seen {
		return nil, fmt.Errorf("no -- +goose Up section")
	}
	if strings.TrimSpace(cur.String()) != "" {
		return nil, fmt.Errorf("line %d: a statement without its closing semicolon", start)
	}
	return out, nil
}

// contractSteps lists what in a migration's Up section may break the previous release's binary
// and carries no rolling-upgrade marker, one "line N: ..." each.
func contractSteps(src string) ([]string, error) {
	stmts, err := upStatements(src)
	if err != nil {
		return nil, err
	}
	created := map[string]bool{}
	var found []string
	for _, s := range stmts {
		var why []string
		for _, r := range contractRules {
			if r.re.MatchString(s.sql) {
				why = append(why, r.what)
			}
		}
		if addColumn.MatchString(s.sql) && notNull.MatchString(s.sql) && !hasDefault.MatchString(s.sql) {
			why = append(why, "adds a NOT NULL column without a DEFAULT: the previous release's inserts leave it out")
		}
		if m := createTable.FindStringSubmatch(s.sql); m != nil {
			created[m[2]] = true
		}
		if m := uniqueIndex.FindStringSubmatch(s.sql); m != nil && !created[m[2]] {
			why = append(why, "adds a unique index to an existing table: the previous release's writes may break it")
		}
		if len(why) > 0 && !safeMarker.MatchString(s.comments) {
			found = append(found, fmt.Sprintf("line %d: %s: %s", s.line, strings.Join(why, "; "), s.sql))
		}
	}
	return found, nil
}

// Every migration of both drivers expands only, or says why its contract-looking step is safe.
func TestMigrationsAreSafeForRollingUpgrades(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"postgres", "sqlite"} {
		files, err := filepath.Glob(filepath.Join(driver, "migrations", "*.sql"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no migrations found (%v)", driver, err)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			found, err := contractSteps(string(src))
			if err != nil {
				t.Errorf("%s: %v", f, err)
			}
			for _, s := range found {
				t.Errorf("%s %s\n  the previous release's binary still runs on this schema during a rolling upgrade: "+
					"expand now, contract in a later release, or mark the statement `-- rolling-upgrade: safe because <reason>`", f, s)
			}
		}
	}
}

func TestContractStepsFlagsWhatBreaksThePreviousRelease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, up string
		flagged  bool
	}{
		{"drop column", "ALTER TABLE jobs DROP COLUMN name;", true},
		{"drop table", "DROP TABLE outbox;", true},
		{"drop index", "DROP INDEX IF EXISTS tasks_ready;", true},
		{"drop constraint", "ALTER TABLE tasks DROP CONSTRAINT tasks_pkey;", true},
		{"rename column", "ALTER TABLE jobs RENAME COLUMN name TO title;", true},
		{"rename table", "ALTER TABLE jobs RENAME TO work;", true},
		{"type", "ALTER TABLE jobs ALTER COLUMN name TYPE VARCHAR(64);", true},
		{"set data type", "ALTER TABLE jobs ALTER name SET DATA TYPE VARCHAR(64);", true},
		{"set not null", "ALTER TABLE jobs ALTER COLUMN name SET NOT NULL;", true},
		{"not null without default", "ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL;", true},
		{"check constraint", "ALTER TABLE jobs ADD CONSTRAINT positive CHECK (total_tasks > 0) NOT VALID;", true},
		{"unique index on an existing table", "CREATE UNIQUE INDEX jobs_name ON jobs (tenant, name);", true},
		{"drop default", "ALTER TABLE jobs ALTER COLUMN name DROP DEFAULT;", true},
		{"truncate", "TRUNCATE outbox;", true},
		{"lower case", "alter table jobs\n  drop column name;", true},
		{"not null with default", "ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';", false},
		{"nullable column", "ALTER TABLE jobs ADD COLUMN owner TEXT;", false},
		{"new table and its unique index", "CREATE TABLE things (id TEXT NOT NULL);\nCREATE UNIQUE INDEX things_id ON things (id);", false},
		{"index", "CREATE INDEX jobs_name ON jobs (name);", false},
		{"drop not null", "ALTER TABLE jobs ALTER COLUMN name DROP NOT NULL;", false},
		{"in a comment only", "-- we could DROP TABLE outbox here, but not yet\nCREATE INDEX a ON b (c);", false},
		{"marked above", "-- rolling-upgrade: safe because no released binary ever read this column\nALTER TABLE jobs DROP COLUMN legacy;", false},
		{"marked inline", "ALTER TABLE jobs DROP COLUMN legacy; -- rolling-upgrade: safe because no released binary ever read it", false},
		{"marker without a reason", "-- rolling-upgrade: safe because yes\nALTER TABLE jobs DROP COLUMN legacy;", true},
		{"a marker covers only its statement", "-- rolling-upgrade: safe because no released binary ever read it\nALTER TABLE jobs DROP COLUMN legacy;\nALTER TABLE jobs DROP COLUMN other;", true},
		{"statement block", "-- +goose StatementBegin\nDO $$ BEGIN\n  ALTER TABLE jobs DROP COLUMN name;\nEND $$;\n-- +goose StatementEnd", true},
	} {
		src := "-- +goose Up\n" + tc.up + "\n\n-- +goose Down\nDROP TABLE jobs;\n"
		found, err := contractSteps(src)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := len(found) > 0; got != tc.flagged {
			t.Errorf("%s: flagged %v (%v), want %v", tc.name, got, found, tc.flagged)
		}
	}
	if found, err := contractSteps("-- +goose Up\nCREATE INDEX a ON b (c);\n-- +goose Down\nDROP INDEX a;\nALTER TABLE b DROP COLUMN c;\n"); err != nil || len(found) != 0 {
		t.Errorf("the Down section was checked: %v %v", found, err)
	}
	if _, err := contractSteps("CREATE TABLE x (id TEXT);"); err == nil {
		t.Error("a file without an Up section passed")
	}
	if _, err := contractSteps("-- +goose Up\nALTER TABLE jobs DROP COLUMN name\n"); err == nil {
		t.Error("a statement without its semicolon passed")
	}
}
