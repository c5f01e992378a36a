package pipeline

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
)

// version is the content hash of a document's tree: the first 16 hex digits of the SHA-256 of its
// canonical JSON (keys sorted, numbers normalized, no white space). Two documents that say the
// same thing in YAML or JSON, with keys in any order, comments or not, have the same version.
func version(n *node) string {
	var buf bytes.Buffer
	writeCanonical(&buf, n)
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:])[:16]
}

func writeCanonical(buf *bytes.Buffer, n *node) {
	switch n.kind {
	case kindNull:
		buf.WriteString("null")
	case kindBool:
		if n.b {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case kindNumber:
		buf.WriteString(n.s)
	case kindString:
		writeString(buf, n.s)
	case kindList:
		buf.WriteByte('[')
		for i, c := range n.list {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeCanonical(buf, c)
		}
		buf.WriteByte(']')
	case kindMap:
		entries := slices.Clone(n.entries)
		slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.key, b.key) })
		buf.WriteByte('{')
		for i, e := range entries {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, e.key)
			buf.WriteByte(':')
			writeCanonical(buf, e.val)
		}
		buf.WriteByte('}')
	}
}

func writeString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // a string always marshals
	buf.Write(b)
}
