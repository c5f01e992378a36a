package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// ManifestName is the name of the manifest at the root of every bundle.
const ManifestName = "bundle_manifest.json"

// The runtimes a bundle may name. "rust" is read as Binary.
const (
	Python = "python"
	Node   = "node"
	Binary = "binary"
)

const (
	// SchemaVersion is the one manifest schema version this package reads and writes.
	SchemaVersion = 1
	// DefaultBinaryEntrypoint is a binary bundle's entrypoint when its manifest names none.
	DefaultBinaryEntrypoint = "bootstrap"
	// MaxManifest is the largest manifest, in bytes, a bundle may hold.
	MaxManifest = 1 << 20
	// MaxEnvAllowlist is the most names a manifest's env_allowlist may list.
	MaxEnvAllowlist = 64
)

// Manifest is bundle_manifest.json: what a bundle runs and every file it holds.
type Manifest struct {
	SchemaVersion int      `json:"schema_version"`
	Runtime       string   `json:"runtime"`
	Entrypoint    string   `json:"entrypoint"`
	Files         []File   `json:"files"`
	EnvAllowlist  []string `json:"env_allowlist,omitempty"`
}

// File is one file of a bundle: its slash-separated path from the bundle's root, the SHA-256 of
// its bytes in lowercase hex, and its size.
type File struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// DecodeManifest reads and checks a manifest: exactly one JSON object with no member this
// package does not know, schema_version 1, a known runtime (rust normalised to binary), an
// entrypoint that is one of its files (bootstrap by default for binary), files with clean
// relative paths, hashes and sizes, and environment variable names in env_allowlist. It returns
// every problem it finds at once.
func DecodeManifest(b []byte) (*Manifest, error) {
	if len(b) > MaxManifest {
		return nil, &Error{Path: ManifestName, Reason: fmt.Sprintf("is %d bytes; at most %d are allowed", len(b), MaxManifest)}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, &Error{Path: ManifestName, Reason: jsonReason(err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &Error{Path: ManifestName, Reason: "holds more after its JSON object; it must be one object alone"}
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// jsonReason words a decoding error for the user who wrote the manifest.
func jsonReason(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("is not valid JSON (at byte %d: %s)", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Sprintf("member %s must be %s, not %s", typ.Field, jsonKind(typ.Type), typ.Value)
	case errors.As(err, &typ):
		return fmt.Sprintf("must be a JSON object, not %s", typ.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "is empty or cut short; it must be one JSON object"
	}
	return "is not a bundle manifest: " + strings.TrimPrefix(err.Error(), "json: ")
}

// jsonKind names the JSON value a Go type is read from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Slice:
		return "an array"
	}
	return "an object"
}

// normRuntime is runtime as a manifest keeps it, and whether it is one at all.
func normRuntime(runtime string) (string, bool) {
	switch runtime {
	case Python, Node, Binary:
		return runtime, true
	case "rust":
		return Binary, true
	}
	return "", false
}

// validate checks what DecodeManifest promises, normalising the runtime and defaulting a binary
// bundle's entrypoint on the way.
func (m *Manifest) validate() error {
	var ps problems
	switch m.SchemaVersion {
	case SchemaVersion:
	case 0:
		ps.add("schema_version", "is missing; it must be %d", SchemaVersion)
	default:
		ps.add("schema_version", "is %d; this server reads schema version %d only", m.SchemaVersion, SchemaVersion)
	}
	if rt, ok := normRuntime(m.Runtime); ok {
		m.Runtime = rt
	} else if m.Runtime == "" {
		ps.add("runtime", "is missing; it must be python, node or binary")
	} else {
		ps.add("runtime", "%q is not a runtime this server runs; use python, node or binary", m.Runtime)
	}

	files := make(map[string]int, len(m.Files))
	for i, f := range m.Files {
		at := "files[" + strconv.Itoa(i) + "]"
		if r := pathProblem(f.Path); r != "" {
			ps.add(at+".path", "%q %s", f.Path, r)
		} else if f.Path == ManifestName {
			ps.add(at+".path", "names the manifest itself; list only the bundle's other files")
		} else if j, dup := files[f.Path]; dup {
			ps.add(at+".path", "%q is listed twice (also as files[%d])", f.Path, j)
		} else {
			files[f.Path] = i
		}
		if !isHash(f.SHA256) {
			ps.add(at+".sha256", "must be the file's SHA-256 as 64 lowercase hexadecimal digits")
		}
		if f.Bytes < 0 {
			ps.add(at+".bytes", "is %d; a size cannot be negative", f.Bytes)
		}
	}
	// A name that is a file cannot also be a folder that another file lies in.
	for i, f := range m.Files {
		for _, dir := range parents(f.Path) {
			if _, ok := files[dir]; ok {
				ps.add("files["+strconv.Itoa(i)+"].path", "%q lies in %q, which is listed as a file", f.Path, dir)
				break
			}
		}
	}
	if len(m.Files) == 0 {
		ps.add("files", "is empty; a bundle holds at least its entrypoint")
	}

	if m.Entrypoint == "" && m.Runtime == Binary {
		m.Entrypoint = DefaultBinaryEntrypoint
	}
	if m.Entrypoint == "" {
		if m.Runtime != "" {
			ps.add("entrypoint", "is missing; a %s bundle names the file it starts", m.Runtime)
		}
	} else if r := pathProblem(m.Entrypoint); r != "" {
		ps.add("entrypoint", "%q %s", m.Entrypoint, r)
	} else if _, ok := files[m.Entrypoint]; !ok && len(m.Files) > 0 {
		ps.add("entrypoint", "%q is not one of the files the manifest lists", m.Entrypoint)
	}

	if len(m.EnvAllowlist) > MaxEnvAllowlist {
		ps.add("env_allowlist", "lists %d names; at most %d are allowed", len(m.EnvAllowlist), MaxEnvAllowlist)
	}
	names := make(map[string]bool, len(m.EnvAllowlist))
	for i, name := range m.EnvAllowlist {
		at := "env_allowlist[" + strconv.Itoa(i) + "]"
		switch {
		case !isEnvName(name):
			ps.add(at, "%q is not an environment variable name (letters, digits and _, not starting with a digit)", name)
		case names[name]:
			ps.add(at, "%q is listed twice", name)
		}
		names[name] = true
	}
	return ps.err()
}

// Unpacked is the sum of the sizes of the bundle's files (math.MaxInt64 if it is larger).
func (m *Manifest) Unpacked() int64 {
	var n int64
	for _, f := range m.Files {
		if f.Bytes > math.MaxInt64-n {
			return math.MaxInt64
		}
		n += max(f.Bytes, 0)
	}
	return n
}

// file returns the manifest's entry for the file at p.
func (m *Manifest) file(p string) (File, bool) {
	for _, f := range m.Files {
		if f.Path == p {
			return f, true
		}
	}
	return File{}, false
}

// clone is a copy of m that shares nothing with it.
func (m *Manifest) clone() *Manifest {
	c := *m
	c.Files = slices.Clone(m.Files)
	c.EnvAllowlist = slices.Clone(m.EnvAllowlist)
	return &c
}
