package sqltext

import (
	"encoding/json"
	"strconv"
	"strings"
)

// JSONRows is, where the database takes no arrays (SQLite), what unnest is where it does: the
// rows of a batch statement passed as one parameter, a JSON array of arrays that json_each reads
// back as a table. It replaces "CASE id WHEN $2 THEN $3 ... END" over padded lists, whose cost
// grew with the square of the batch: every row of the statement scanned every WHEN.
//
// It returns the FROM item "(SELECT value ->> 0 AS name0, ... FROM json_each($param)) AS alias"
// and the parameter's value. Values are strings, integers or nil (JSON null, read back as NULL).
func JSONRows(param int, alias string, names []string, rows [][]any) (string, any, error) {
	b, err := json.Marshal(rows)
	if err != nil {
		return "", nil, err
	}
	var s strings.Builder
	s.WriteString("(SELECT ")
	for i, name := range names {
		if i > 0 {
			s.WriteString(", ")
		}
		s.WriteString("value ->> " + strconv.Itoa(i) + " AS " + name)
	}
	s.WriteString(" FROM json_each($" + strconv.Itoa(param) + ")) AS " + alias)
	return s.String(), string(b), nil
}
