// Package examples holds runnable examples: worker/ is a Go worker built on the SDK, and
// job.json is seed 001's five-task job.
package examples
