package pipeline

import (
	"fmt"
	"mime"
	"strconv"
	"strings"
)

// Parse reads a DAG document, applies its defaults and validates it. contentType
// "application/json" (or any +json type) reads JSON; anything else, empty included, reads YAML,
// which accepts JSON text too. On success the Document has its Version set and Problems is nil;
// otherwise the Document is nil and Problems lists everything wrong, in the order of the walk:
// name, defaults, jobs, publish, and within each part as written.
func Parse(data []byte, contentType string) (*Document, Problems) {
	if len(data) > MaxDocumentSize {
		return nil, Problems{{Message: fmt.Sprintf("document is larger than %d bytes", MaxDocumentSize)}}
	}
	var w walker
	var root *node
	if isJSON(contentType) {
		root = readJSON(data, &w.problems)
	} else {
		root = readYAML(data, &w.problems)
	}
	if root == nil {
		return nil, w.list
	}
	doc := w.document(root)
	if len(w.list) > 0 {
		return nil, w.list
	}
	doc.Version = version(root)
	return doc, nil
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// topKeys are the keys a document may have.
var topKeys = []string{"name", "defaults", "jobs", "publish"}

// document walks the document. Publish entries are read before the jobs, because an input's where
// is checked against the dataset its output is published as; their problems are still listed
// after the jobs'.
func (w *walker) document(root *node) *Document {
	if root.kind != kindMap {
		w.node(root, "", "document must be a map with name, jobs, and optionally defaults and publish")
		return nil
	}
	w.object(root, "", topKeys...)
	doc := &Document{}
	if n := w.required(root, "", "name"); n != nil {
		doc.Name, _ = w.name(n, "name", nameRE)
	}
	if n := root.lookup("defaults"); n != nil {
		doc.Defaults = w.defaults(n, "defaults")
	}

	jobsNode := w.required(root, "", "jobs")
	if jobsNode != nil && jobsNode.kind != kindList {
		w.node(jobsNode, "jobs", "must be a list")
		jobsNode = nil
	}
	if jobsNode != nil && len(jobsNode.list) == 0 {
		w.node(jobsNode, "jobs", "must list at least one job")
	}
	dc := newDocContext(jobsNode)

	pw := &walker{}
	if n := root.lookup("publish"); n != nil {
		doc.Publish = pw.publish(n, "publish", dc)
	}

	if jobsNode != nil {
		doc.Jobs = make([]Job, len(jobsNode.list))
		for i, jn := range jobsNode.list {
			doc.Jobs[i] = w.job(jn, index("jobs", i), i, dc, doc.Defaults)
		}
		w.cycles(jobsNode, doc, dc)
	}
	w.list = append(w.list, pw.list...)
	w.size(root, doc)
	return doc
}

// size checks the limits of the document as a whole: how many buffered datasets it publishes,
// and how many datasets it creates or names in all.
func (w *walker) size(root *node, doc *Document) {
	buffered := 0
	for _, p := range doc.Publish {
		if p.WriteMode == WriteBuffered {
			buffered++
		}
	}
	if buffered > MaxBufferedDatasets {
		w.node(root.lookup("publish"), "publish", "a document may publish at most %d buffered datasets, not %d",
			MaxBufferedDatasets, buffered)
	}
	outputs := 0
	read := map[string]bool{}
	for _, j := range doc.Jobs {
		outputs += j.Outputs
		for _, in := range j.Inputs {
			if ds := in.From.Dataset; ds != "" && doc.Publish[ds] == nil {
				read[ds] = true
			}
		}
	}
	if total := outputs + buffered + len(read); total > MaxDatasets {
		w.at("", 0, "a document may create or name at most %d datasets, not %d: %s, %s and %s of other pipelines read by its inputs",
			MaxDatasets, total, plural(outputs, "job output"), plural(buffered, "buffered dataset"), plural(len(read), "dataset"))
	}
}

// docContext is what checks of one part of a document need to know of the others.
type docContext struct {
	jobs     map[string]jobRef      // each valid job name, at its first occurrence
	names    map[string]bool        // job names met so far in the walk, for duplicates
	publish  map[string]*Publish    // entries whose from is valid, by dataset name
	byOutput map[JobOutput]*Publish // the entry an output is published as (direct first)
	webhooks map[string]bool
	inputs   int // inputs met so far in the walk
}

type jobRef struct {
	index   int
	outputs int // -1 when the job's outputs is invalid
}

// newDocContext indexes the jobs' names and output counts ahead of the walk, so that publish
// entries and inputs can refer to jobs anywhere in the document.
func newDocContext(jobs *node) *docContext {
	dc := &docContext{
		jobs:     make(map[string]jobRef),
		names:    make(map[string]bool),
		publish:  make(map[string]*Publish),
		byOutput: make(map[JobOutput]*Publish),
		webhooks: make(map[string]bool),
	}
	if jobs == nil {
		return dc
	}
	for i, jn := range jobs.list {
		if jn.kind != kindMap {
			continue
		}
		nn := jn.lookup("name")
		if nn == nil || nn.kind != kindString || !nameRE.MatchString(nn.s) {
			continue
		}
		if _, dup := dc.jobs[nn.s]; dup {
			continue
		}
		ref := jobRef{index: i, outputs: -1}
		if on := jn.lookup("outputs"); on != nil && on.isInt() {
			if v, err := strconv.Atoi(on.s); err == nil && v >= 0 {
				ref.outputs = v
			}
		}
		dc.jobs[nn.s] = ref
	}
	return dc
}

// outputRange checks that output is one of job's outputs, when the job's output count is known.
func (w *walker) outputRange(n *node, path string, job string, output int, dc *docContext) bool {
	ref := dc.jobs[job]
	if ref.outputs < 0 {
		return false
	}
	if output < 0 || output >= ref.outputs {
		w.node(n, path, "output %d is out of range: job %q has %s", output, job, plural(ref.outputs, "output"))
		return false
	}
	return true
}

func plural(n int, what string) string {
	switch n {
	case 0:
		return "no " + what + "s"
	case 1:
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
