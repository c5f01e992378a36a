package pipeline

import (
	"fmt"
	"strings"
	"testing"
)

// pub is a document with srcJob and the given publish map (flow style).
func pub(entries string) string {
	return doc(jobs(srcJob), "publish: "+entries)
}

// manyColumns is a flow list of n string columns c0, c1, ... and the list of their names.
func manyColumns(n int) (columns, names string) {
	var cs, ns []string
	for i := range n {
		cs = append(cs, fmt.Sprintf("{name: c%d, type: string}", i))
		ns = append(ns, fmt.Sprintf("c%d", i))
	}
	return "[" + strings.Join(cs, ", ") + "]", "[" + strings.Join(ns, ", ") + "]"
}

// indexList is a flow list of n indexes of one column each, on columns c0, c1, ... in turn.
func indexList(n int) string {
	var ix []string
	for i := range n {
		ix = append(ix, fmt.Sprintf("[c%d]", i%MaxKeyColumns))
	}
	return "[" + strings.Join(ix, ", ") + "]"
}

func TestPublishRules(t *testing.T) {
	t.Parallel()
	const cols = `columns: [{name: dedupe_key, type: string, required: true}, {name: level, type: text}]`
	maxCols, _ := manyColumns(MaxColumns)
	tooManyCols, _ := manyColumns(MaxColumns + 1)
	keyCols, maxKey := manyColumns(MaxKeyColumns)
	keyCols2, tooLongKey := manyColumns(MaxKeyColumns + 1)
	runRules(t, []ruleCase{
		{"publish must be a map", pub(`[a]`), []string{`publish: must be a map of dataset name to entry`}},
		{"dataset names match the pattern", pub(`{Alerts: {from: {job: src, output: 0}}}`),
			[]string{`publish.Alerts: dataset name "Alerts" does not match ` + namePat}},
		{"an entry must be a map", pub(`{a: src}`), []string{`publish.a: must be a map`}},
		{"an unknown key", pub(`{a: {from: {job: src, output: 0}, retention: 30d}}`),
			[]string{`publish.a: unknown key "retention"`}},
		{"from is required", pub(`{a: {storage: s3}}`), []string{`publish.a.from: required`}},
		{"from.job must exist", pub(`{a: {from: {job: nope, output: 0}}}`),
			[]string{`publish.a.from.job: unknown job "nope"`}},
		{"from.output is required", pub(`{a: {from: {job: src}}}`), []string{`publish.a.from.output: required`}},
		{"from.output is in range", pub(`{a: {from: {job: src, output: 5}}}`),
			[]string{`publish.a.from.output: output 5 is out of range: job "src" has 2 outputs`}},
		{"from takes no dataset", pub(`{a: {from: {job: src, output: 0, dataset: b}}}`),
			[]string{`publish.a.from: unknown key "dataset"`}},
		{"storage values", pub(`{a: {from: {job: src, output: 0}, storage: gcs}}`),
			[]string{`publish.a.storage: must be postgres or s3, not "gcs"`}},
		{"write_mode values", pub(`{a: {from: {job: src, output: 0}, write_mode: batched}}`),
			[]string{`publish.a.write_mode: must be buffered or direct, not "batched"`}},
		{"buffered needs a schema", pub(`{a: {from: {job: src, output: 0}, write_mode: buffered}}`),
			[]string{`publish.a.schema: required when write_mode is buffered`}},
		{"buffered needs a unique key", pub(`{a: {from: {job: src, output: 0}, write_mode: buffered, schema: {` + cols + `}}}`),
			[]string{`publish.a.schema.unique: required when write_mode is buffered`}},
		{"unique names columns", pub(`{a: {from: {job: src, output: 0}, write_mode: buffered, schema: {columns: [{name: level, type: string}], unique: [dedupe_key]}}}`),
			[]string{`publish.a.schema.unique[0]: unknown column "dedupe_key"`}},
		{"unique must not be empty", pub(`{a: {from: {job: src, output: 0}, schema: {` + cols + `, unique: []}}}`),
			[]string{`publish.a.schema.unique: must list at least one column`}},
		{"columns are required", pub(`{a: {from: {job: src, output: 0}, schema: {unique: [x]}}}`),
			[]string{`publish.a.schema.columns: required`}},
		{"columns must not be empty", pub(`{a: {from: {job: src, output: 0}, schema: {columns: []}}}`),
			[]string{`publish.a.schema.columns: must list at least one column`}},
		{"column names match the pattern", pub(`{a: {from: {job: src, output: 0}, schema: {columns: [{name: Level, type: string}]}}}`),
			[]string{`publish.a.schema.columns[0].name: "Level" does not match ^[a-z_][a-z0-9_]{0,62}$`}},
		{"column names are unique", pub(`{a: {from: {job: src, output: 0}, schema: {columns: [{name: x, type: string}, {name: x, type: int}]}}}`),
			[]string{`publish.a.schema.columns[1].name: duplicate column "x"`}},
		{"column types", pub(`{alert_events: {from: {job: src, output: 0}, schema: {columns: [{name: x, type: string}, {name: id, type: uuid}]}}}`),
			[]string{`publish.alert_events.schema.columns[1].type: unknown type "uuid": must be string, integer, number, boolean, timestamp or json`}},
		{"org_id is reserved", pub(`{a: {from: {job: src, output: 0}, schema: {columns: [{name: x, type: string}, {name: org_id, type: string}]}}}`),
			[]string{`publish.a.schema.columns[1].name: column name "org_id" is reserved: the sink sets it from the publisher's tenant`}},
		{"names beginning with an underscore are reserved", pub(`{a: {from: {job: src, output: 0}, write_mode: buffered,` +
			` schema: {columns: [{name: _cursor, type: integer}, {name: x, type: string}], unique: [_cursor]}}}`),
			[]string{`publish.a.schema.columns[0].name: column names beginning with "_" are reserved`}},
		{"a column's type is required", pub(`{a: {from: {job: src, output: 0}, schema: {columns: [{name: x}]}}}`),
			[]string{`publish.a.schema.columns[0].type: required`}},
		{"a column's required is a boolean", pub(`{a: {from: {job: src, output: 0}, schema: {columns: [{name: x, type: string, required: "no"}]}}}`),
			[]string{`publish.a.schema.columns[0].required: must be true or false`}},
		{"a column's unknown key", pub(`{a: {from: {job: src, output: 0}, schema: {columns: [{name: x, type: string, default: y}]}}}`),
			[]string{`publish.a.schema.columns[0]: unknown key "default"`}},
		{"indexes name columns", pub(`{a: {from: {job: src, output: 0}, schema: {` + cols + `, indexes: [[level], [level, chain_id]]}}}`),
			[]string{`publish.a.schema.indexes[1][1]: unknown column "chain_id"`}},
		// What a table of the dataset can hold in both databases (more failed to deploy).
		{"at most MaxColumns columns", pub(`{a: {from: {job: src, output: 0}, write_mode: buffered, schema: {columns: ` + maxCols + `, unique: [c0]}}}`), nil},
		{"not more", pub(`{a: {from: {job: src, output: 0}, write_mode: buffered, schema: {columns: ` + tooManyCols + `, unique: [c0]}}}`),
			[]string{fmt.Sprintf(`publish.a.schema.columns: must list at most %d columns, not %d`, MaxColumns, MaxColumns+1)}},
		{"a unique key and indexes of at most MaxKeyColumns columns", pub(`{a: {from: {job: src, output: 0}, write_mode: buffered,` +
			` schema: {columns: ` + keyCols + `, unique: ` + maxKey + `, indexes: [` + maxKey + `]}}}`), nil},
		{"not longer", pub(`{a: {from: {job: src, output: 0}, write_mode: buffered,` +
			` schema: {columns: ` + keyCols2 + `, unique: ` + tooLongKey + `, indexes: [[c0], ` + tooLongKey + `]}}}`),
			[]string{fmt.Sprintf(`publish.a.schema.unique: must list at most %d columns, not %d`, MaxKeyColumns, MaxKeyColumns+1),
				fmt.Sprintf(`publish.a.schema.indexes[1]: must list at most %d columns, not %d`, MaxKeyColumns, MaxKeyColumns+1)}},
		{"at most MaxIndexes indexes", pub(`{a: {from: {job: src, output: 0}, write_mode: buffered,` +
			` schema: {columns: ` + keyCols + `, unique: [c0], indexes: ` + indexList(MaxIndexes) + `}}}`), nil},
		{"not more", pub(`{a: {from: {job: src, output: 0}, write_mode: buffered,` +
			` schema: {columns: ` + keyCols + `, unique: [c0], indexes: ` + indexList(MaxIndexes+1) + `}}}`),
			[]string{fmt.Sprintf(`publish.a.schema.indexes: must list at most %d indexes, not %d`, MaxIndexes, MaxIndexes+1)}},
		{"indexes are lists of lists", pub(`{a: {from: {job: src, output: 0}, schema: {` + cols + `, indexes: level}}}`),
			[]string{`publish.a.schema.indexes: must be a list of lists of columns`}},
		{"filter fields are columns when there is a schema", pub(`{a: {from: {job: src, output: 0}, schema: {` + cols + `}, filter_fields: [level, chain_id]}}`),
			[]string{`publish.a.filter_fields[1]: "chain_id" is not a column of the schema`}},
		{"filter fields are unique", pub(`{a: {from: {job: src, output: 0}, filter_fields: [level, level]}}`),
			[]string{`publish.a.filter_fields[1]: duplicate filter field "level"`}},
		{"an output is published directly under one name", pub(`{a: {from: {job: src, output: 0}}, b: {from: {job: src, output: 0}}}`),
			[]string{`publish.b.from: output 0 of job "src" is already published as "a"`}},
		{"a buffered dataset may name an output published directly", pub(`{a: {from: {job: src, output: 0}},` +
			` b: {from: {job: src, output: 0}, write_mode: buffered, schema: {` + cols + `, unique: [dedupe_key]}}}`), nil},
	})
}
