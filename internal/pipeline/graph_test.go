package pipeline

import "testing"

func TestCycles(t *testing.T) {
	t.Parallel()
	in := func(job string) string { return `[{from: {job: ` + job + `, output: 0}}]` }
	runRules(t, []ruleCase{
		{"two jobs reading each other", doc(jobs(readerOf("a", in("b"), ""), readerOf("b", in("a"), ""))),
			[]string{`jobs: cycle a -> b -> a`}},
		{"a cycle is named once, from its first job, in the direction data flows",
			doc(jobs(srcJob,
				readerOf("a", `[{from: {job: src, output: 0}}, {from: {job: c, output: 0}}]`, ""),
				readerOf("b", in("a"), ""),
				readerOf("c", in("b"), ""))),
			[]string{`jobs: cycle a -> b -> c -> a`}},
		{"each separate cycle is named",
			doc(jobs(readerOf("a", in("b"), ""), readerOf("b", in("a"), ""),
				readerOf("x", in("y"), ""), readerOf("y", in("x"), ""))),
			[]string{`jobs: cycle a -> b -> a`, `jobs: cycle x -> y -> x`}},
		{"a cycle through a dataset of the document",
			doc(jobs(readerOf("a", `[{from: {dataset: bs}}]`, ""), readerOf("b", in("a"), "")),
				`publish: {bs: {from: {job: b, output: 0}}}`),
			[]string{`jobs: cycle a -> b -> a`}},
		{"a job reading the dataset it publishes",
			doc(jobs(readerOf("a", `[{from: {dataset: own}}]`, "")), `publish: {own: {from: {job: a, output: 0}}}`),
			[]string{`jobs: cycle a -> a`}},
		{"a diamond is no cycle",
			doc(jobs(srcJob, readerOf("a", in("src"), ""), readerOf("b", in("src"), ""),
				readerOf("c", `[{from: {job: a, output: 0}}, {from: {job: b, output: 0}}]`, ""))), nil},
	})
}
