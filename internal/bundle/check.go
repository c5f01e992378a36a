package bundle

import (
	"archive/zip"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

// Limits bound what a bundle may hold. A zero field takes its value from DefaultLimits.
type Limits struct {
	Files     int   // files the manifest lists
	FileBytes int64 // bytes of any one file
	Unpacked  int64 // bytes of all files together
	Ratio     int   // uncompressed to compressed size of an entry over 1 MiB
	Archive   int64 // bytes of the archive itself
}

// DefaultLimits are the limits of a zero Limits.
var DefaultLimits = Limits{Files: 1000, FileBytes: 32 << 20, Unpacked: 256 << 20, Ratio: 1000, Archive: 64 << 20}

// ratioFloor is the size above which an entry's compression ratio is checked: a small file
// of zeros compresses well and harms nobody.
const ratioFloor = 1 << 20

// OrDefaults is l with DefaultLimits in its zero fields.
func (l Limits) OrDefaults() Limits {
	d := DefaultLimits
	return Limits{Files: cmp.Or(l.Files, d.Files), FileBytes: cmp.Or(l.FileBytes, d.FileBytes), Unpacked: cmp.Or(l.Unpacked, d.Unpacked),
		Ratio: cmp.Or(l.Ratio, d.Ratio), Archive: cmp.Or(l.Archive, d.Archive)}
}

// Check reads the whole archive and verifies it as Extract does, without writing anything. It
// answers the manifest and the SHA-256 (hex) of the whole archive bytes it read.
func Check(r io.ReaderAt, size int64, l Limits) (m *Manifest, sum string, err error) {
	a, err := open(r, size, l)
	if err != nil {
		return nil, "", err
	}
	for _, mb := range a.files {
		if err := mb.copyTo(io.Discard); err != nil {
			return nil, "", err
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, size)); err != nil {
		return nil, "", fmt.Errorf("bundle: read the archive: %w", err)
	}
	return a.m, hex.EncodeToString(h.Sum(nil)), nil
}

// archive is a bundle whose manifest and entries passed every check that needs no inflating.
type archive struct {
	m     *Manifest
	files []member // in the archive's order
	dirs  []string // every folder a file lies in, each after its parent
}

// member is a declared file and the entry that holds it.
type member struct {
	File
	zf   *zip.File
	exec bool // marked executable in the archive
}

// open reads the archive's directory and manifest and checks every entry against the manifest
// and l: names, modes, sizes, compression; it inflates nothing but the manifest.
func open(r io.ReaderAt, size int64, l Limits) (*archive, error) {
	l = l.OrDefaults()
	if size > l.Archive {
		return nil, &Error{Reason: fmt.Sprintf("the archive is %d bytes; at most %d are allowed", size, l.Archive)}
	}
	zr, err := zip.NewReader(r, size)
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) { // names are checked below, with better words
		return nil, &Error{Reason: "the upload is not a zip archive this server can read (" + err.Error() + ")"}
	}
	m, err := readManifest(zr.File, l)
	if err != nil {
		return nil, err
	}

	declared := make(map[string]int, len(m.Files))
	folders := map[string]bool{}
	for i, f := range m.Files {
		declared[f.Path] = i
		for _, d := range parents(f.Path) {
			folders[d] = true
		}
	}
	// Every entry beyond one per file and folder is a problem: past a screenful of them, the
	// archive is refused without walking its entries.
	if n, allowed := len(zr.File), 1+len(m.Files)+len(folders); n > allowed+maxProblems {
		return nil, &Error{Reason: fmt.Sprintf("the archive holds %d entries, far more than the %d files and folders %s accounts for",
			n, allowed-1, ManifestName)}
	}
	var ps problems
	a := &archive{m: m}
	seen := make(map[string]bool, len(zr.File))
	found := make([]bool, len(m.Files))
	for _, zf := range zr.File {
		name := zf.Name
		if name == ManifestName {
			continue
		}
		if seen[name] {
			ps.add(name, "appears twice in the archive; each name may appear once")
			continue
		}
		seen[name] = true
		dir, isDir := strings.CutSuffix(name, "/")
		if r := pathProblem(dir); r != "" {
			ps.add(name, "%s", r)
			continue
		}
		i, declaredFile := declared[name]
		if declaredFile {
			found[i] = true
		}
		if !supported(zf, &ps) {
			continue
		}
		mode := zf.Mode()
		if isDir {
			switch {
			case mode.Type() != fs.ModeDir:
				ps.add(name, "is a %s, not a folder; bundles hold regular files and folders only", kind(mode))
			case !folders[dir]:
				ps.add(name, "is a folder that holds none of the files %s lists (undeclared entry)", ManifestName)
			case zf.UncompressedSize64 != 0:
				ps.add(name, "is a folder entry with contents")
			}
			continue
		}
		if !declaredFile {
			ps.add(name, "is not listed in %s (undeclared entry); list it or leave it out of the archive", ManifestName)
			continue
		}
		f := m.Files[i]
		switch {
		case !mode.IsRegular():
			ps.add(name, "is a %s, not a regular file; bundles hold regular files only", kind(mode))
		case zf.UncompressedSize64 != uint64(f.Bytes):
			ps.add(name, "the archive says it is %d bytes but %s declares %d", zf.UncompressedSize64, ManifestName, f.Bytes)
		case bomb(zf, l.Ratio):
			ps.add(name, "would inflate %d bytes from %d, more than %d to 1: refused as a zip bomb", zf.UncompressedSize64, zf.CompressedSize64, l.Ratio)
		default:
			a.files = append(a.files, member{File: f, zf: zf, exec: mode&0o111 != 0})
		}
	}
	for i, f := range m.Files {
		if !found[i] {
			ps.add(f.Path, "is listed in %s but missing from the archive", ManifestName)
		}
	}
	if err := ps.err(); err != nil {
		return nil, err
	}
	for d := range folders {
		a.dirs = append(a.dirs, d)
	}
	slices.Sort(a.dirs) // a parent sorts before what lies in it
	return a, nil
}

// readManifest finds the manifest among the entries, reads it and checks it against l.
func readManifest(entries []*zip.File, l Limits) (*Manifest, error) {
	var zf *zip.File
	n := 0
	for _, e := range entries {
		if e.Name == ManifestName {
			zf = e
			n++
		}
	}
	switch {
	case n > 1:
		return nil, &Error{Path: ManifestName, Reason: fmt.Sprintf("appears %d times in the archive; it must appear once", n)}
	case n == 0:
		for _, e := range entries {
			if strings.HasSuffix(e.Name, "/"+ManifestName) {
				return nil, &Error{Reason: fmt.Sprintf("the archive has no %s at its root, only %s: zip the folder's contents, not the folder",
					ManifestName, quotePath(e.Name))}
			}
		}
		return nil, &Error{Reason: fmt.Sprintf("the archive has no %s at its root", ManifestName)}
	}
	var ps problems
	if !supported(zf, &ps) {
		return nil, ps.err()
	}
	if !zf.Mode().IsRegular() {
		return nil, &Error{Path: ManifestName, Reason: fmt.Sprintf("is a %s, not a regular file", kind(zf.Mode()))}
	}
	if zf.UncompressedSize64 > MaxManifest {
		return nil, &Error{Path: ManifestName, Reason: fmt.Sprintf("is %d bytes; at most %d are allowed", zf.UncompressedSize64, MaxManifest)}
	}
	rc, err := zf.Open()
	if err != nil {
		return nil, &Error{Path: ManifestName, Reason: "cannot be read: " + err.Error()}
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, MaxManifest+1))
	if err != nil {
		return nil, &Error{Path: ManifestName, Reason: "is corrupt: " + err.Error()}
	}
	m, err := DecodeManifest(b)
	if err != nil {
		return nil, err
	}

	if len(m.Files) > l.Files {
		ps.add("files", "lists %d files; at most %d are allowed", len(m.Files), l.Files)
	}
	for i, f := range m.Files {
		if f.Bytes > l.FileBytes {
			ps.add("files["+strconv.Itoa(i)+"].bytes", "%s is %d bytes; at most %d are allowed per file", quotePath(f.Path), f.Bytes, l.FileBytes)
		}
	}
	if n := m.Unpacked(); n > l.Unpacked {
		ps.add("files", "add up to %d bytes; at most %d are allowed", n, l.Unpacked)
	}
	return m, ps.err()
}

// supported reports whether zf is stored or deflated and not encrypted, the entries this
// package reads, and adds a problem when it is not.
func supported(zf *zip.File, ps *problems) bool {
	switch {
	case zf.Flags&0x1 != 0:
		ps.add(zf.Name, "is encrypted; bundles cannot be")
	case zf.Method != zip.Store && zf.Method != zip.Deflate:
		ps.add(zf.Name, "is compressed with method %d; only stored and deflated entries are read", zf.Method)
	default:
		return true
	}
	return false
}

// bomb reports whether zf would inflate more than ratio times its compressed size.
func bomb(zf *zip.File, ratio int) bool {
	if zf.UncompressedSize64 <= ratioFloor {
		return false
	}
	return zf.CompressedSize64 == 0 || zf.UncompressedSize64/zf.CompressedSize64 > uint64(ratio)
}

// kind names what a non-regular mode is, for a refusal.
func kind(mode fs.FileMode) string {
	switch t := mode.Type(); {
	case t&fs.ModeSymlink != 0:
		return "symbolic link"
	case t&fs.ModeDir != 0:
		return "folder"
	case t&fs.ModeNamedPipe != 0:
		return "named pipe"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeDevice != 0:
		return "device"
	case t == 0:
		return "regular file"
	}
	return "special file (" + mode.String() + ")"
}

// copyTo inflates the member into w, reading at most one byte more than the manifest declares
// whatever the archive says, and checks its size and SHA-256. A failure of w is returned as it
// is; anything wrong with the member is an *Error.
func (mb member) copyTo(w io.Writer) error {
	rc, err := mb.zf.Open()
	if err != nil {
		return &Error{Path: mb.Path, Reason: "cannot be read: " + err.Error()}
	}
	defer rc.Close()
	h := sha256.New()
	dst := &writeErr{w: w}
	n, err := io.Copy(io.MultiWriter(h, dst), io.LimitReader(rc, mb.Bytes+1))
	switch {
	case dst.err != nil:
		return fmt.Errorf("bundle: write %s: %w", mb.Path, dst.err)
	case err != nil:
		return &Error{Path: mb.Path, Reason: "is corrupt in the archive (" + err.Error() + ")"}
	case n > mb.Bytes:
		return &Error{Path: mb.Path, Reason: fmt.Sprintf("holds more than the %d bytes %s declares", mb.Bytes, ManifestName)}
	case n < mb.Bytes:
		return &Error{Path: mb.Path, Reason: fmt.Sprintf("holds %d bytes but %s declares %d", n, ManifestName, mb.Bytes)}
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != mb.SHA256 {
		return &Error{Path: mb.Path, Reason: fmt.Sprintf("has SHA-256 %s but %s declares %s", sum, ManifestName, mb.SHA256)}
	}
	return nil
}

// writeErr keeps the error of the writer it wraps, to tell it from a read error.
type writeErr struct {
	w   io.Writer
	err error
}

func (w *writeErr) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}
