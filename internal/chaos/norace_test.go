//go:build !race

package chaos_test

const raceEnabled = false
