package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Every whole pipeline document the docs show (a YAML block with a name and jobs, in
// docs/contracts and the README, and examples/pipeline) deploys unchanged on a fresh `baton dev`,
// with nothing but its defaults: a user who copies one gets a pipeline, not a refusal.
func TestDocumentedPipelinesDeployOnAFreshDev(t *testing.T) {
	t.Parallel()
	type document struct{ where, body string }
	var docs []document
	block := regexp.MustCompile("(?s)```ya?ml\n(.*?)```")
	files, err := filepath.Glob("../../docs/contracts/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(files, "../../README.md") {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range block.FindAllSubmatchIndex(raw, -1) {
			body := string(raw[m[2]:m[3]])
			if regexp.MustCompile(`(?m)^name:`).MatchString(body) && regexp.MustCompile(`(?m)^jobs:`).MatchString(body) {
				line := strings.Count(string(raw[:m[0]]), "\n") + 1
				docs = append(docs, document{filepath.Base(f) + ":" + strconv.Itoa(line), body})
			}
		}
	}
	examples, err := filepath.Glob("../../examples/pipeline/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range examples {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, document{strings.TrimPrefix(f, "../../"), string(raw)})
	}
	if len(docs) < 2 {
		t.Fatalf("found %d pipeline documents in the docs; the test looks in the wrong place", len(docs))
	}
	s := startMetricsDev(t)
	for _, d := range docs {
		req, _ := http.NewRequest("POST", s.public+"/pipelines", strings.NewReader(d.body))
		req.Header.Set("x-api-key", s.key)
		req.Header.Set("Content-Type", "application/yaml")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var msg strings.Builder
		_, _ = io.Copy(&msg, res.Body)
		res.Body.Close()
		if res.StatusCode != 201 && res.StatusCode != 200 {
			t.Errorf("the document at %s: %d %s", d.where, res.StatusCode, msg.String())
		} else {
			t.Logf("deployed the document at %s", d.where)
		}
	}
}
