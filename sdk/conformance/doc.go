// Package conformance holds the SDK conformance harness (its tests): every SDK's conformance
// program runs one scenario against a real `baton dev` on SQLite and a real `baton server` on
// PostgreSQL, and every outcome is checked through the producer API. README.md specifies the
// scenario and the programs' interface.
package conformance
