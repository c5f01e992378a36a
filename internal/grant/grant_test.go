package grant

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPrefix(t *testing.T) {
	const root = "s3://data/baton/"
	for _, tc := range []struct {
		name, raw, want, problem string
	}{
		{"canonical", "s3://data/baton/datasets/u/v/", "s3://data/baton/datasets/u/v/", ""},
		{"directory slash added", "s3://data/baton/datasets/u/v", "s3://data/baton/datasets/u/v/", ""},
		{"scheme case", "S3://data/baton/datasets/u/", "s3://data/baton/datasets/u/", ""},
		{"dot dot", "s3://data/baton/datasets/../../secrets/", "", `".." segment`},
		{"dot dot at the end", "s3://data/baton/datasets/..", "", `".." segment`},
		{"dot segment", "s3://data/baton/./datasets/", "", `"." segment`},
		{"empty segment", "s3://data/baton//datasets/", "", "empty segment"},
		{"empty prefix", "s3://data/", "", "whole bucket"},
		{"no bucket", "s3:///baton/datasets/", "", "names no bucket"},
		{"the root itself", "s3://data/baton/", "", "root itself"},
		{"the root without its slash", "s3://data/baton", "", "root itself"},
		{"wildcard star", "s3://data/baton/datasets/*", "", "wildcard"},
		{"wildcard widening a sibling", "s3://data/baton/datasets/u*/", "", "wildcard"},
		{"question mark", "s3://data/baton/datasets/u?/", "", "wildcard"},
		{"brackets", "s3://data/baton/datasets/[a-z]/", "", "wildcard"},
		{"policy variable", "s3://data/baton/${aws:username}/", "", "policy variable"},
		{"other bucket", "s3://other/baton/datasets/u/", "", `bucket "other"`},
		{"bucket case", "s3://Data/baton/datasets/u/", "", `bucket "Data"`},
		{"other scheme", "gs://data/baton/datasets/u/", "", `scheme "gs"`},
		{"file scheme on s3", "file:///etc/", "", `scheme "file"`},
		{"http", "http://data/baton/x/", "", `scheme "http"`},
		{"not a URI", "data/baton/datasets/u/", "", "not a URI"},
		{"outside the root", "s3://data/elsewhere/u/", "", "not under"},
		{"a sibling of the root", "s3://data/batonx/u/", "", "not under"},
		{"fragment", "s3://data/baton/datasets/u#x/", "", `"#"`},
		{"percent escape", "s3://data/baton/datasets/%2e%2e/", "", `"%"`},
		{"backslash", `s3://data/baton/datasets\..\x/`, "", "backslash"},
		{"control character", "s3://data/baton/datasets/\n/", "", "control"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Prefix(tc.raw, root)
			if tc.problem == "" {
				if err != nil || got != tc.want {
					t.Fatalf("Prefix(%q) = %q, %v; want %q", tc.raw, got, err, tc.want)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrPrefix) || !strings.Contains(err.Error(), tc.problem) {
				t.Fatalf("Prefix(%q) = %q, %v; want an ErrPrefix saying %q", tc.raw, got, err, tc.problem)
			}
		})
	}
}

func TestPrefixUnderADirectoryStore(t *testing.T) {
	const root = "file:///var/lib/baton/blobs/"
	if got, err := Prefix("file:///var/lib/baton/blobs/datasets/u/v", root); err != nil || got != "file:///var/lib/baton/blobs/datasets/u/v/" {
		t.Fatalf("got %q, %v", got, err)
	}
	for _, raw := range []string{"file:///etc/", "file:///var/lib/baton/blobs/../x/", "s3://data/x/", "file:///var/lib/baton/blobs/"} {
		if got, err := Prefix(raw, root); err == nil {
			t.Errorf("Prefix(%q) = %q, want an error", raw, got)
		}
	}
}

func TestRefPrefix(t *testing.T) {
	for ref, want := range map[string]string{
		`"s3://data/baton/datasets/u/v/"`: "s3://data/baton/datasets/u/v/",
		`{"scheme":"s3","bucket":"bucket","prefix":"cold/datasets/u/v/","glob":"*.parquet"}`: "s3://bucket/cold/datasets/u/v/",
		`{"scheme":"s3","bucket":"bucket","prefix":"/cold/"}`:                                "s3://bucket/cold/",
		`{"scheme":"file","prefix":"/var/lib/x/"}`:                                           "file:///var/lib/x/",
		`null`:                              "",
		`{"table":"alert_events"}`:          "",
		`{"scheme":"s3","bucket":"bucket"}`: "",
		`42`:                                "",
	} {
		if got := RefPrefix(json.RawMessage(ref)); got != want {
			t.Errorf("RefPrefix(%s) = %q, want %q", ref, got, want)
		}
	}
}

func TestDerive(t *testing.T) {
	const root = "s3://data/baton/"
	in := func(uuid, ref string) Input { return Input{DatasetUUID: uuid, StorageRef: json.RawMessage(ref)} }
	g, skipped := Derive(root, Attempt{TaskID: "t1", Attempt: 2,
		Inputs: []Input{
			in("in", `{"scheme":"s3","bucket":"data","prefix":"baton/datasets/in/t0/1/","glob":"*.parquet"}`),
			in("in2", `"s3://other/cold/"`),                                 // another bucket: left out
			in("in3", `{"scheme":"s3","bucket":"data","prefix":"baton/*"}`), // a wildcard: left out
			in("in4", `null`),                                // unregistered: nothing to read
			in("in5", `"s3://data/baton/buffers/"`),          // every tenant's batches: left out
			in("in6", `"s3://data/baton/datasets/in/t0/1/"`), // another dataset's files: left out
		},
		Outputs: []Output{{DatasetUUID: "out"}, {DatasetUUID: "alerts", Buffered: true}}})
	want := &S3{ReadPrefixes: []string{"s3://data/baton/datasets/in/t0/1/"},
		WritePrefixes: []string{"s3://data/baton/buffers/alerts/t1/2/", "s3://data/baton/datasets/out/t1/2/", "s3://data/baton/scratch/t1/2/"}}
	if !slices.Equal(g.ReadPrefixes, want.ReadPrefixes) || !slices.Equal(g.WritePrefixes, want.WritePrefixes) {
		t.Fatalf("Derive = %+v, want %+v", g, want)
	}
	if len(skipped) != 4 {
		t.Fatalf("skipped %q, want the four references outside their dataset's prefix", skipped)
	}
	// A malformed id can never widen the grant.
	g, _ = Derive(root, Attempt{TaskID: "..", Attempt: 1, Outputs: []Output{{DatasetUUID: "*"}}})
	if len(g.WritePrefixes) != 0 {
		t.Fatalf("Derive with malformed ids = %+v, want no write prefix", g)
	}
}

// Rule: a dataset version's files lie strictly under its own dataset's prefix, root +
// "datasets/{dataset_uuid}/"; a location anywhere else (the root's shared folders, another
// dataset, the dataset's whole prefix) is neither registered nor granted.
func TestDatasetLocation(t *testing.T) {
	const root = "s3://data/baton/"
	const ds = "4113a1f9-b534-44bb-8301-e0549103fb8d"
	for _, tc := range []struct {
		name, raw, uuid, want, problem string
	}{
		{"a version under its dataset", root + "datasets/" + ds + "/t1/1/", ds, root + "datasets/" + ds + "/t1/1/", ""},
		{"deeper, without its slash", root + "datasets/" + ds + "/v2/part", ds, root + "datasets/" + ds + "/v2/part/", ""},
		{"the shared buffers folder", root + "buffers/", ds, "", "not under the dataset's own prefix " + root + "datasets/" + ds + "/"},
		{"another tenant's batches", root + "buffers/" + ds + "/t9/1/", ds, "", "not under the dataset's own prefix"},
		{"scratch", root + "scratch/t1/1/", ds, "", "not under the dataset's own prefix"},
		{"another dataset", root + "datasets/0000aaaa-b534-44bb-8301-e0549103fb8d/t1/1/", ds, "", "not under the dataset's own prefix"},
		{"a sibling sharing the uuid's start", root + "datasets/" + ds + "x/t1/", ds, "", "not under the dataset's own prefix"},
		{"every dataset", root + "datasets/", ds, "", "not under the dataset's own prefix"},
		{"the dataset's whole prefix", root + "datasets/" + ds + "/", ds, "", "the dataset's own prefix itself"},
		{"a climb out of the dataset", root + "datasets/" + ds + "/../other/", ds, "", `".." segment`},
		{"outside the root", "s3://data/elsewhere/datasets/" + ds + "/v/", ds, "", "not under the object storage root"},
		{"another bucket", "s3://other/baton/datasets/" + ds + "/v/", ds, "", `bucket "other"`},
		{"not a URI", "postgres_table:dataset_x", ds, "", "not a URI"},
		{"an empty dataset uuid", root + "datasets//v/", "", "", "cannot name a prefix"},
		{"a dataset uuid with a slash", root + "datasets/a/b/v/", "a/b", "", "cannot name a prefix"},
		{"a dataset uuid that climbs", root + "datasets/../v/", "..", "", "cannot name a prefix"},
		{"a wildcard dataset uuid", root + "datasets/*/v/", "*", "", "cannot name a prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DatasetLocation(tc.raw, root, tc.uuid)
			if tc.problem == "" {
				if err != nil || got != tc.want {
					t.Fatalf("DatasetLocation(%q, %q) = %q, %v; want %q", tc.raw, tc.uuid, got, err, tc.want)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrPrefix) || !strings.Contains(err.Error(), tc.problem) {
				t.Fatalf("DatasetLocation(%q, %q) = %q, %v; want an ErrPrefix saying %q", tc.raw, tc.uuid, got, err, tc.problem)
			}
			// The same location is never granted either.
			g, skipped := Derive(root, Attempt{TaskID: "t1", Attempt: 1, Inputs: []Input{{DatasetUUID: tc.uuid,
				StorageRef: json.RawMessage(strconv.Quote(tc.raw))}}})
			if len(g.ReadPrefixes) != 0 || len(skipped) != 1 {
				t.Fatalf("Derive granted %q (skipped %q)", g.ReadPrefixes, skipped)
			}
		})
	}
}

func TestPolicy(t *testing.T) {
	until := time.Date(2026, 11, 24, 16, 0, 0, 0, time.UTC)
	g := &S3{ReadPrefixes: []string{"s3://data/baton/datasets/in/t0/1/"},
		WritePrefixes: []string{"s3://data/baton/scratch/t1/2/"}}
	raw, err := Policy(g, until)
	if err != nil {
		t.Fatal(err)
	}
	var doc policyDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	byAction := map[string]statement{}
	for _, s := range doc.Statement {
		if s.Effect != "Allow" {
			t.Errorf("statement %+v: only Allow statements are expected (deny by default)", s)
		}
		if got := s.Condition["DateLessThan"]["aws:CurrentTime"]; got != "2026-11-24T16:00:00Z" {
			t.Errorf("statement %v: time condition %v, want the token's expiry", s.Action, got)
		}
		byAction[s.Action[0]] = s
	}
	if got := byAction["s3:GetObject"].Resource; !slices.Equal(got, []string{"arn:aws:s3:::data/baton/datasets/in/t0/1/*", "arn:aws:s3:::data/baton/scratch/t1/2/*"}) {
		t.Errorf("GetObject on %q", got)
	}
	if got := byAction["s3:PutObject"].Resource; !slices.Equal(got, []string{"arn:aws:s3:::data/baton/scratch/t1/2/*"}) {
		t.Errorf("PutObject on %q, want the write prefix only", got)
	}
	list := byAction["s3:ListBucket"]
	if !slices.Equal(list.Resource, []string{"arn:aws:s3:::data"}) {
		t.Errorf("ListBucket on %q", list.Resource)
	}
	if got := list.Condition["StringLike"]["s3:prefix"]; !slices.Equal(toStrings(got), []string{"baton/datasets/in/t0/1/*", "baton/scratch/t1/2/*"}) {
		t.Errorf("ListBucket s3:prefix condition %v", got)
	}

	for name, bad := range map[string]*S3{
		"empty":            {},
		"other scheme":     {WritePrefixes: []string{"file:///tmp/x/"}},
		"two buckets":      {ReadPrefixes: []string{"s3://a1b/x/"}, WritePrefixes: []string{"s3://b2c/y/"}},
		"not canonical":    {WritePrefixes: []string{"s3://data/baton/x"}},
		"wildcard":         {WritePrefixes: []string{"s3://data/baton/*/"}},
		"whole bucket":     {ReadPrefixes: []string{"s3://data/"}},
		"dot dot":          {ReadPrefixes: []string{"s3://data/baton/../x/"}},
		"policy variables": {ReadPrefixes: []string{"s3://data/${aws:username}/"}},
	} {
		if p, err := Policy(bad, until); err == nil {
			t.Errorf("%s: Policy = %s, want an error", name, p)
		}
	}
	many := &S3{}
	for i := range 40 {
		many.ReadPrefixes = append(many.ReadPrefixes, "s3://data/baton/datasets/0123456789abcdef/"+strings.Repeat("x", i+1)+"/")
	}
	if _, err := Policy(many, until); !errors.Is(err, ErrPolicyTooLarge) {
		t.Errorf("40 prefixes: %v, want ErrPolicyTooLarge", err)
	}
}

func toStrings(v any) []string {
	var out []string
	if vs, ok := v.([]any); ok {
		for _, x := range vs {
			s, _ := x.(string)
			out = append(out, s)
		}
	}
	if vs, ok := v.([]string); ok {
		out = vs
	}
	return out
}

func TestSessionName(t *testing.T) {
	if got := sessionName("0196f7a2-1d1c-7000-8000-000000000001-3"); got != "baton-0196f7a2-1d1c-7000-8000-000000000001-3" {
		t.Errorf("got %q", got)
	}
	if got := sessionName("a b/c" + strings.Repeat("x", 100)); len(got) != 64 || strings.ContainsAny(got, " /") {
		t.Errorf("got %q", got)
	}
}
