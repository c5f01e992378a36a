// Package wire holds the JSON shapes that cross Baton's process boundaries, so that the server
// and the programs that talk to it (the sink, the worker SDK, the producer client) share one
// definition of each instead of a copy each.
package wire
