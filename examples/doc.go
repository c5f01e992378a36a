// Package examples holds runnable examples: worker/ is a Go worker built on the SDK, and
// job.json is the five-task example job of the producer API (docs/contracts/producer.md).
package examples
