// Package examples holds runnable examples: worker/ is a Go worker built on the SDK, job.json is
// the five-task example job of the producer API (docs/contracts/producer.md), and python/ holds a
// small client per wire dialect, written from the contract pages alone and run against a real
// baton dev by TestPythonExamples.
package examples
