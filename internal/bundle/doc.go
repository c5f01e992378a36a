// Package bundle is a user code bundle's format: its manifest, the checks an upload and an
// extraction pass, how one is built from a directory and started, and a cache of verified,
// extracted bundles by hash.
//
// A bundle is a zip archive with bundle_manifest.json at its root. The manifest names the
// runtime, the entrypoint and every file with its size and SHA-256; an archive passes only if it
// holds exactly those files (and the folders they lie in) with exactly those bytes, under names
// that stay inside the bundle, within Limits. Every refusal is an *Error (several at once an
// Errors) whose message is written for the user who uploaded the bundle.
//
// The package uses the standard library alone and nothing of Baton's.
package bundle
