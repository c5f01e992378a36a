// Package docs holds no code: it is the home of the Markdown documentation's tests. Its link
// test checks that every relative link and #anchor of the repository's Markdown files, and every
// docs/*.md citation in a Go comment, points at a file and heading that exist; and that no file
// names a document outside the repository.
package docs
