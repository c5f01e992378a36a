//go:build race

package chaos_test

// raceEnabled: this test runs with the race detector, and so do the processes it builds.
const raceEnabled = true
