package pipeline

import (
	"fmt"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
)

// sized is a document of source jobs with the given outputs each, the given buffered datasets (all
// of job s0's output 0) and a reactive job without outputs reading the given datasets of other
// pipelines.
func sized(outputs []int, buffered int, external []string) string {
	var js []string
	for i, n := range outputs {
		js = append(js, fmt.Sprintf(`{name: s%d, activation: source, runtime: lambda, operator: op, outputs: %d, source: {kind: manual}}`, i, n))
	}
	if len(external) > 0 {
		var ins []string
		for _, ds := range external {
			ins = append(ins, `{from: {dataset: `+ds+`}}`)
		}
		js = append(js, `{name: r, activation: reactive, runtime: lambda, operator: op, outputs: 0, inputs: [`+strings.Join(ins, ", ")+`]}`)
	}
	var pubs []string
	for i := range buffered {
		pubs = append(pubs, fmt.Sprintf(`b%d: {from: {job: s0, output: 0}, write_mode: buffered, schema: {columns: [{name: k, type: string}], unique: [k]}}`, i))
	}
	if len(pubs) == 0 {
		return doc(js)
	}
	return doc(js, "publish: {"+strings.Join(pubs, ", ")+"}")
}

// inputList is a flow list of n inputs, each reading output 0 of job src.
func inputList(n int) string {
	return "[" + strings.Repeat("{from: {job: src, output: 0}}, ", n-1) + "{from: {job: src, output: 0}}]"
}

func repeat(n, times int) []int {
	out := make([]int, times)
	for i := range out {
		out[i] = n
	}
	return out
}

func TestDocumentLimits(t *testing.T) {
	t.Parallel()
	// 15 jobs of 64 outputs and one of 24: 984 outputs.
	outputs := append(repeat(MaxOutputs, 15), 24)
	runRules(t, []ruleCase{
		{"a document at every limit", pipelinetest.SizedDoc("d", pipelinetest.Size{Buffered: MaxBufferedDatasets, Columns: MaxColumns,
			Indexes: MaxIndexes, KeyColumns: MaxKeyColumns, Outputs: MaxOutputs, Datasets: MaxDatasets}), nil},
		{"at most MaxBufferedDatasets buffered datasets", sized([]int{1}, MaxBufferedDatasets, nil), nil},
		{"not more", sized([]int{1}, MaxBufferedDatasets+1, nil),
			[]string{fmt.Sprintf(`publish: a document may publish at most %d buffered datasets, not %d`, MaxBufferedDatasets, MaxBufferedDatasets+1)}},
		{"at most MaxDatasets datasets created or named", sized(outputs, MaxBufferedDatasets, nil), nil},
		{"not one more read from another pipeline", sized(outputs, MaxBufferedDatasets, []string{"other"}),
			[]string{`a document may create or name at most 1000 datasets, not 1001: 984 job outputs, 16 buffered datasets and 1 dataset of other pipelines read by its inputs`}},
		{"a dataset read twice counts once", sized(append(repeat(MaxOutputs, 15), 23), MaxBufferedDatasets, []string{"other", "other"}), nil},
		{"nor one more output", sized(append(outputs, 1), MaxBufferedDatasets, nil),
			[]string{`a document may create or name at most 1000 datasets, not 1001: 985 job outputs, 16 buffered datasets and no datasets of other pipelines read by its inputs`}},
		{"at most MaxInputs inputs", doc(jobs(srcJob, readerOf("r", inputList(600), ""), readerOf("q", inputList(400), ""))), nil},
		{"not one more", doc(jobs(srcJob, readerOf("r", inputList(600), ""), readerOf("q", inputList(401), ""))),
			[]string{`jobs[2].inputs[400]: a document may have at most 1000 inputs in all`}},
		{"33 jobs of 1000 outputs", sized(repeat(1000, 33), 0, nil), func() []string {
			var want []string
			for i := range 33 {
				want = append(want, fmt.Sprintf("jobs[%d].outputs: must be between 0 and 64", i))
			}
			return want
		}()},
	})
}
