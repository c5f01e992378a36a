package bundle

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestCheckAcceptsAValidBundle(t *testing.T) {
	t.Parallel()
	m, entries := sample(t)
	entries = append(entries, entry{name: "lib/", mode: fs.ModeDir | 0o755})
	zb := bundleOf(t, m, entries...)
	got, hash, err := Check(bytes.NewReader(zb), int64(len(zb)), Limits{})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if hash != sum(zb) {
		t.Errorf("hash %s; want %s", hash, sum(zb))
	}
	if got.Runtime != Python || got.Entrypoint != "main.py" || len(got.Files) != 2 {
		t.Errorf("manifest %+v", got)
	}
}

// TestCheckRefusesHostileArchives is the list of what an upload may not be, each with the entry
// or member the refusal names.
func TestCheckRefusesHostileArchives(t *testing.T) {
	t.Parallel()
	evil := []byte("evil")
	main := []byte("print('hello')\n")
	mainFile := fileOf("main.py", main)
	mainEntry := entry{name: "main.py", data: main}
	ok := manifestOf(Python, "main.py", mainFile)
	withFile := func(p string, b []byte) *Manifest {
		return manifestOf(Python, "main.py", mainFile, fileOf(p, b))
	}
	zeros := make([]byte, 2<<20+1) // deflates about 1,020 to 1

	for _, c := range []struct {
		name       string
		zip        func(t *testing.T) []byte
		limits     Limits
		path, want string
	}{
		// Names that would land outside the folder, as entries the manifest does not list...
		{"entry ../evil", func(t *testing.T) []byte { return bundleOf(t, ok, mainEntry, entry{name: "../evil", data: evil}) }, Limits{}, "../evil", "zip-slip"},
		{"entry a/../../evil", func(t *testing.T) []byte { return bundleOf(t, ok, mainEntry, entry{name: "a/../../evil", data: evil}) }, Limits{}, "a/../../evil", "zip-slip"},
		{"entry /etc/x", func(t *testing.T) []byte { return bundleOf(t, ok, mainEntry, entry{name: "/etc/x", data: evil}) }, Limits{}, "/etc/x", "absolute"},
		{`entry a\b`, func(t *testing.T) []byte { return bundleOf(t, ok, mainEntry, entry{name: `a\b`, data: evil}) }, Limits{}, `a\b`, "backslash"},
		{"entry a NUL b", func(t *testing.T) []byte { return bundleOf(t, ok, mainEntry, entry{name: "a\x00b", data: evil}) }, Limits{}, "a\x00b", "control character"},
		{"folder entry ../", func(t *testing.T) []byte { return bundleOf(t, ok, mainEntry, entry{name: "../", mode: fs.ModeDir}) }, Limits{}, "../", "zip-slip"},
		// ...and as files it does.
		{"declared ../evil", func(t *testing.T) []byte {
			return bundleOf(t, withFile("../evil", evil), mainEntry, entry{name: "../evil", data: evil})
		}, Limits{}, "files[1].path", "zip-slip"},
		{"declared a/../../evil", func(t *testing.T) []byte {
			return bundleOf(t, withFile("a/../../evil", evil), mainEntry, entry{name: "a/../../evil", data: evil})
		}, Limits{}, "files[1].path", "zip-slip"},
		{"declared /etc/x", func(t *testing.T) []byte {
			return bundleOf(t, withFile("/etc/x", evil), mainEntry, entry{name: "/etc/x", data: evil})
		}, Limits{}, "files[1].path", "absolute"},
		{`declared a\b`, func(t *testing.T) []byte {
			return bundleOf(t, withFile(`a\b`, evil), mainEntry, entry{name: `a\b`, data: evil})
		}, Limits{}, "files[1].path", "backslash"},
		{"declared a NUL b", func(t *testing.T) []byte {
			return bundleOf(t, withFile("a\x00b", evil), mainEntry, entry{name: "a\x00b", data: evil})
		}, Limits{}, "files[1].path", "control character"},

		{"symlink pointing outside", func(t *testing.T) []byte {
			target := []byte("/etc/passwd")
			return bundleOf(t, withFile("link", target), mainEntry, entry{name: "link", data: target, mode: fs.ModeSymlink | 0o777})
		}, Limits{}, "link", "symbolic link"},
		{"named pipe", func(t *testing.T) []byte {
			return bundleOf(t, withFile("fifo", nil), mainEntry, entry{name: "fifo", mode: fs.ModeNamedPipe | 0o644})
		}, Limits{}, "fifo", "named pipe"},
		{"folder entry that is a symlink", func(t *testing.T) []byte {
			return bundleOf(t, withFile("lib/x.py", evil), mainEntry, entry{name: "lib/", mode: fs.ModeSymlink | 0o777},
				entry{name: "lib/x.py", data: evil})
		}, Limits{}, "lib/", "symbolic link"},
		{"undeclared entry", func(t *testing.T) []byte { return bundleOf(t, ok, mainEntry, entry{name: "extra.py", data: evil}) }, Limits{}, "extra.py", "undeclared entry"},
		{"undeclared folder", func(t *testing.T) []byte {
			return bundleOf(t, ok, mainEntry, entry{name: "empty/", mode: fs.ModeDir | 0o755})
		}, Limits{}, "empty/", "undeclared entry"},
		{"missing declared file", func(t *testing.T) []byte { return bundleOf(t, withFile("lib/x.py", evil), mainEntry) }, Limits{}, "lib/x.py", "missing from the archive"},
		{"hash mismatch", func(t *testing.T) []byte {
			return bundleOf(t, withFile("x.py", evil), mainEntry, entry{name: "x.py", data: []byte("live")})
		}, Limits{}, "x.py", "has SHA-256 " + sum([]byte("live"))},
		{"size mismatch", func(t *testing.T) []byte {
			return bundleOf(t, withFile("x.py", evil), mainEntry, entry{name: "x.py", data: []byte("evil!")})
		}, Limits{}, "x.py", "the archive says it is 5 bytes but bundle_manifest.json declares 4"},
		{"header lies about the size", func(t *testing.T) []byte {
			body := []byte("evil and more")
			h := &zip.FileHeader{Name: "x.py", Method: zip.Store, CRC32: crc32.ChecksumIEEE(body),
				CompressedSize64: uint64(len(body)), UncompressedSize64: uint64(len(evil))}
			return bundleOf(t, withFile("x.py", evil), mainEntry, entry{raw: h, data: body})
		}, Limits{}, "x.py", "corrupt"},
		{"corrupt entry", func(t *testing.T) []byte {
			h := &zip.FileHeader{Name: "x.py", Method: zip.Store, CRC32: 1, CompressedSize64: uint64(len(evil)), UncompressedSize64: uint64(len(evil))}
			return bundleOf(t, withFile("x.py", evil), mainEntry, entry{raw: h, data: evil})
		}, Limits{}, "x.py", "corrupt"},
		{"duplicate entry", func(t *testing.T) []byte { return bundleOf(t, ok, mainEntry, mainEntry) }, Limits{}, "main.py", "appears twice"},
		{"duplicate manifest", func(t *testing.T) []byte { return bundleOf(t, ok, mainEntry, manifestEntry(t, ok)) }, Limits{}, ManifestName, "appears 2 times"},
		{"no manifest", func(t *testing.T) []byte { return makeZip(t, mainEntry) }, Limits{}, "", "no bundle_manifest.json at its root"},
		{"manifest in a folder", func(t *testing.T) []byte {
			me := manifestEntry(t, ok)
			me.name = "app/" + ManifestName
			return makeZip(t, me, entry{name: "app/main.py", data: main})
		}, Limits{}, "", "zip the folder's contents, not the folder"},
		{"manifest too large", func(t *testing.T) []byte {
			return makeZip(t, entry{name: ManifestName, data: bytes.Repeat([]byte(" "), MaxManifest+1)}, mainEntry)
		}, Limits{}, ManifestName, "at most 1048576"},
		{"manifest with unknown member", func(t *testing.T) []byte {
			b, _ := json.Marshal(ok)
			return makeZip(t, entry{name: ManifestName, data: append(b[:len(b)-1], []byte(`,"memory":512}`)...)}, mainEntry)
		}, Limits{}, ManifestName, `unknown field "memory"`},
		{"schema version 2", func(t *testing.T) []byte {
			m := *ok
			m.SchemaVersion = 2
			return bundleOf(t, &m, mainEntry)
		}, Limits{}, "schema_version", "schema version 1 only"},
		{"runtime java", func(t *testing.T) []byte { return bundleOf(t, manifestOf("java", "main.py", mainFile), mainEntry) }, Limits{}, "runtime", `"java"`},
		{"entrypoint not declared", func(t *testing.T) []byte { return bundleOf(t, manifestOf(Python, "app.py", mainFile), mainEntry) }, Limits{}, "entrypoint", `"app.py" is not one of the files`},
		{"too many files", func(t *testing.T) []byte {
			return bundleOf(t, manifestOf(Python, "main.py", mainFile, fileOf("a", nil), fileOf("b", nil)), mainEntry, entry{name: "a"}, entry{name: "b"})
		}, Limits{Files: 2}, "files", "lists 3 files; at most 2"},
		{"file too large", func(t *testing.T) []byte {
			return bundleOf(t, withFile("big", zeros), mainEntry, entry{name: "big", data: zeros})
		},
			Limits{FileBytes: 1 << 20}, "files[1].bytes", "at most 1048576 are allowed per file"},
		{"too many bytes in all", func(t *testing.T) []byte {
			return bundleOf(t, manifestOf(Python, "main.py", mainFile, fileOf("a", zeros[:600]), fileOf("b", zeros[:600])), mainEntry,
				entry{name: "a", data: zeros[:600]}, entry{name: "b", data: zeros[:600]})
		}, Limits{Unpacked: 1000}, "files", "at most 1000 are allowed"},
		{"archive too large", func(t *testing.T) []byte { return bundleOf(t, ok, mainEntry) }, Limits{Archive: 100}, "", "at most 100 are allowed"},
		{"1,000 to 1 ratio", func(t *testing.T) []byte {
			return bundleOf(t, withFile("zeros", zeros), mainEntry, entry{name: "zeros", data: zeros})
		},
			Limits{}, "zeros", "zip bomb"},
		{"encrypted entry", func(t *testing.T) []byte {
			h := &zip.FileHeader{Name: "x.py", Method: zip.Store, Flags: 0x1, CRC32: crc32.ChecksumIEEE(evil), CompressedSize64: 4, UncompressedSize64: 4}
			return bundleOf(t, withFile("x.py", evil), mainEntry, entry{raw: h, data: evil})
		}, Limits{}, "x.py", "encrypted"},
		{"unknown compression", func(t *testing.T) []byte {
			h := &zip.FileHeader{Name: "x.py", Method: 14, CRC32: crc32.ChecksumIEEE(evil), CompressedSize64: 4, UncompressedSize64: 4}
			return bundleOf(t, withFile("x.py", evil), mainEntry, entry{raw: h, data: evil})
		}, Limits{}, "x.py", "method 14"},
		{"not a zip", func(t *testing.T) []byte { return []byte("PK but not really") }, Limits{}, "", "not a zip archive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			zb := c.zip(t)
			_, _, err := Check(bytes.NewReader(zb), int64(len(zb)), c.limits)
			wantRefusal(t, err, c.path, c.want)
			t.Log(err)
		})
	}
}

// bombOf is a bundle whose entry "bomb" has a header that declares 10 GB, inflated from a few
// bytes; declared is the size the manifest gives it.
func bombOf(t *testing.T, declared int64) []byte {
	t.Helper()
	body := []byte{0x03, 0x00} // an empty deflate stream: the bytes are never there
	h := &zip.FileHeader{Name: "bomb", Method: zip.Deflate, CompressedSize64: uint64(len(body)), UncompressedSize64: 10 << 30}
	m := manifestOf(Binary, "bomb", File{Path: "bomb", SHA256: strings.Repeat("0", 64), Bytes: declared})
	return bundleOf(t, m, entry{raw: h, data: body})
}

// TestCheckRefusesAZipBombBeforeInflating: a 10 GB entry is refused from its header alone, fast
// and with little memory, whether the manifest declares it as it is or as something small.
func TestCheckRefusesAZipBombBeforeInflating(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		declared   int64
		path, want string
	}{
		{"declared as it is", 10 << 30, "files[0].bytes", "at most 33554432 are allowed per file"},
		{"declared small", 100, "bomb", "the archive says it is 10737418240 bytes but bundle_manifest.json declares 100"},
	} {
		t.Run(c.name, func(t *testing.T) {
			zb := bombOf(t, c.declared)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, _, err := Check(bytes.NewReader(zb), int64(len(zb)), Limits{})
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			wantRefusal(t, err, c.path, c.want)
			if took > time.Second {
				t.Errorf("refused after %s", took)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
				t.Errorf("allocated %d bytes to refuse it", grew)
			}
		})
	}
}

// TestCheckRefusesMoreBytesThanDeclaredWhateverTheHeaderSays: an entry whose header claims 100
// bytes, but whose stream inflates to 4 MiB, is read no further than the declared size plus one
// byte.
func TestCheckRefusesMoreBytesThanDeclaredWhateverTheHeaderSays(t *testing.T) {
	t.Parallel()
	var deflated bytes.Buffer
	zw := zip.NewWriter(&deflated)
	w, _ := zw.Create("x")
	w.Write(make([]byte, 4<<20))
	zw.Close()
	// Take the real deflated stream of 4 MiB of zeros and give it a header that says 100 bytes.
	zr, err := zip.NewReader(bytes.NewReader(deflated.Bytes()), int64(deflated.Len()))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := zr.File[0].OpenRaw()
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, zr.File[0].CompressedSize64)
	if _, err := io.ReadFull(raw, body); err != nil {
		t.Fatal(err)
	}
	hundred := make([]byte, 100)
	h := &zip.FileHeader{Name: "x", Method: zip.Deflate, CRC32: crc32.ChecksumIEEE(hundred), CompressedSize64: uint64(len(body)), UncompressedSize64: 100}
	zb := bundleOf(t, manifestOf(Binary, "x", fileOf("x", hundred)), entry{raw: h, data: body})
	_, _, err = Check(bytes.NewReader(zb), int64(len(zb)), Limits{})
	wantRefusal(t, err, "x", "corrupt")
}

// TestCheckListsEveryStructuralProblem: one answer names each bad entry, so that a user fixes
// them all at once.
func TestCheckListsEveryStructuralProblem(t *testing.T) {
	t.Parallel()
	main := []byte("x")
	m := manifestOf(Python, "main.py", fileOf("main.py", main), fileOf("gone.py", main))
	zb := bundleOf(t, m, entry{name: "main.py", data: main}, entry{name: "../evil"}, entry{name: "extra"})
	_, _, err := Check(bytes.NewReader(zb), int64(len(zb)), Limits{})
	got := refusals(t, err)
	var paths []string
	for _, e := range got {
		paths = append(paths, e.Path)
	}
	if strings.Join(paths, " ") != "../evil extra gone.py" {
		t.Errorf("refusals of %v; want ../evil, extra, gone.py", paths)
	}
}

// TestCheckBoundsTheAnswer: thirty bad files get twenty refusals and a count of the rest.
func TestCheckBoundsTheAnswer(t *testing.T) {
	t.Parallel()
	m := manifestOf(Binary, "f0")
	var entries []entry
	for i := range 30 {
		name := fmt.Sprintf("f%d", i)
		m.Files = append(m.Files, fileOf(name, []byte("x")))
		entries = append(entries, entry{name: name, data: []byte("xx")})
	}
	zb := bundleOf(t, m, entries...)
	_, _, err := Check(bytes.NewReader(zb), int64(len(zb)), Limits{})
	got := refusals(t, err)
	if len(got) != maxProblems+1 || got[maxProblems].Reason != "and 10 more problems" {
		t.Errorf("%d refusals, the last %v", len(got), got[len(got)-1])
	}
}

// TestCheckRefusesFarMoreEntriesThanFiles: an archive of many more entries than the manifest's
// files and folders is refused before they are walked.
func TestCheckRefusesFarMoreEntriesThanFiles(t *testing.T) {
	t.Parallel()
	main := []byte("x")
	entries := []entry{{name: "main.py", data: main}}
	for i := range 1000 {
		entries = append(entries, entry{name: fmt.Sprintf("extra%d", i)})
	}
	zb := bundleOf(t, manifestOf(Python, "main.py", fileOf("main.py", main)), entries...)
	_, _, err := Check(bytes.NewReader(zb), int64(len(zb)), Limits{})
	wantRefusal(t, err, "", "the archive holds 1002 entries, far more than the 1 files and folders bundle_manifest.json accounts for")
}

// TestCheckReadsTheUnixModeFromTheExternalAttributes: an entry the central directory marks as a
// symlink (S_IFLNK, written there by hand) is refused.
func TestCheckReadsTheUnixModeFromTheExternalAttributes(t *testing.T) {
	t.Parallel()
	target := []byte("../../../etc/passwd")
	m := manifestOf(Python, "main.py", fileOf("main.py", target))
	zb := bundleOf(t, m, entry{name: "main.py", data: target})
	// Rewrite main.py's central directory record: made by Unix (3), mode S_IFLNK|0777.
	cd := bytes.LastIndex(zb, []byte("PK\x01\x02"))
	if cd < 0 || string(zb[cd+46:cd+46+len("main.py")]) != "main.py" {
		t.Fatal("main.py's central directory record not found")
	}
	binary.LittleEndian.PutUint16(zb[cd+4:], 3<<8|20)
	binary.LittleEndian.PutUint32(zb[cd+38:], (0o120000|0o777)<<16)
	_, _, err := Check(bytes.NewReader(zb), int64(len(zb)), Limits{})
	wantRefusal(t, err, "main.py", "symbolic link")
}
