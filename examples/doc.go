// Package examples holds runnable examples: worker/ is a Go worker built on the SDK, and
// seed-001-job.json is seed 001's five-task job.
package examples
