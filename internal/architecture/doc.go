// Package architecture holds the tests that keep Baton's package boundaries: which packages may
// link which. It has no code of its own.
package architecture
