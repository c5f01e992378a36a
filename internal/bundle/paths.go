package bundle

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// MaxPath is the longest name, in bytes, a file of a bundle may have.
const MaxPath = 1024

// pathProblem says what is wrong with p as the name of a file inside a bundle, or "" when
// nothing is: a name is relative, slash-separated and clean, names no parent, and holds no
// control character, so that it can only ever land inside the folder a bundle is extracted to.
func pathProblem(p string) string {
	switch {
	case p == "":
		return "is an empty name"
	case len(p) > MaxPath:
		return fmt.Sprintf("is a name of %d bytes; at most %d are allowed", len(p), MaxPath)
	case !utf8.ValidString(p):
		return "is not valid UTF-8"
	case strings.ContainsFunc(p, isControl):
		return "holds a control character (NUL, newline, ...); file names may not"
	case strings.Contains(p, `\`):
		return `holds a backslash; separate folders with "/"`
	case strings.HasPrefix(p, "/"):
		return "is an absolute path; names are relative to the bundle's root"
	}
	for _, elem := range strings.Split(p, "/") {
		switch elem {
		case "..":
			return `climbs out of the bundle with ".." (zip-slip); names must stay inside it`
		case "":
			return "has an empty folder name (two slashes in a row, or a trailing slash)"
		case ".":
			return `holds a "." folder; write the name without it`
		}
	}
	if c := path.Clean(p); c != p {
		return fmt.Sprintf("is not a clean path; write it as %q", c)
	}
	return ""
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }

// parents are the folders p lies in, outermost first: "a/b/c" lies in "a" and "a/b".
func parents(p string) []string {
	var out []string
	for i := range len(p) {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}

// isHash reports whether s is a SHA-256 as this package writes it: 64 lowercase hex digits.
func isHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// isEnvName reports whether s is a POSIX environment variable name: [A-Za-z_][A-Za-z0-9_]*.
func isEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
