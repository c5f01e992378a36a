package blob

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxKeyLen is S3's limit on an object's name, in bytes.
const maxKeyLen = 1024

// CheckKey reports whether key may name an object: a non-empty, slash-separated relative path of
// valid UTF-8 of at most 1024 bytes, whose segments are neither empty (no leading, trailing or
// doubled "/") nor "." or "..", with no backslash, wildcard (* ? [ ]), '%', '#' or control
// character. Such a key names the same file on every operating system and the same object in
// every bucket, cannot climb out of the root, and makes a URI (Root()+key) that needs no
// escaping and has no query or fragment.
//
// Two rules serve the storage library: a key may not contain "__0x", which it would read as an
// escape sequence and store under another name; and its last segment may not end in ".tmp" or
// ".attrs", the names a directory store gives its temporary and attribute files.
//
// The error wraps ErrOutside and says what is wrong.
func CheckKey(key string) error {
	return checkKey(key, true)
}

// CheckPrefix reports whether prefix may name a directory of objects: CheckKey's rules, except
// that its last segment may end in any way and one trailing "/" is allowed. The error wraps
// ErrOutside and says what is wrong.
func CheckPrefix(prefix string) error {
	return checkKey(strings.TrimSuffix(prefix, "/"), false)
}

// checkKey applies CheckKey's rules; for a list prefix (object false) the last segment may end
// in any way, being only the start of a name.
func checkKey(key string, object bool) error {
	if reason := keyProblem(key, object); reason != "" {
		return fmt.Errorf("%w: key %q %s", ErrOutside, key, reason)
	}
	return nil
}

func keyProblem(key string, object bool) string {
	switch {
	case key == "":
		return "is empty"
	case len(key) > maxKeyLen:
		return fmt.Sprintf("is longer than %d bytes", maxKeyLen)
	case !utf8.ValidString(key):
		return "is not valid UTF-8"
	case strings.IndexFunc(key, unicode.IsControl) >= 0:
		return "contains a control character"
	case strings.Contains(key, `\`):
		return "contains a backslash"
	case strings.ContainsAny(key, "*?[]"):
		return "contains a wildcard (* ? [ ])"
	case strings.Contains(key, "%"):
		return `contains "%"`
	case strings.Contains(key, "#"):
		return `contains "#"`
	case strings.Contains(key, "__0x"):
		return `contains "__0x", which the storage library reads as an escape sequence`
	}
	segments := strings.Split(key, "/")
	for _, seg := range segments {
		switch seg {
		case "":
			return "has an empty segment"
		case ".", "..":
			return fmt.Sprintf("has a %q segment", seg)
		}
	}
	last := segments[len(segments)-1]
	if object && (strings.HasSuffix(last, ".tmp") || strings.HasSuffix(last, ".attrs")) {
		return "ends in .tmp or .attrs, names reserved for a directory store's own files"
	}
	return ""
}

// bucketProblem says what is wrong with an S3 bucket name, or returns "". The rules are S3's:
// 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit.
func bucketProblem(name string) string {
	if len(name) < 3 || len(name) > 63 {
		return "must be 3 to 63 characters long"
	}
	for _, r := range name {
		if !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '.' || r == '-') {
			return "may hold only lowercase letters, digits, dots and hyphens"
		}
	}
	if name[0] == '.' || name[0] == '-' || name[len(name)-1] == '.' || name[len(name)-1] == '-' {
		return "must start and end with a letter or digit"
	}
	return ""
}
