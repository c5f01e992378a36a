//go:build race

package examples

// raceEnabled: this test runs with the race detector. The baton binaries it builds are built
// with it too, so that they reuse the packages the test build compiled instead of compiling
// every package a second time, and race in the processes is caught as well.
const raceEnabled = true
