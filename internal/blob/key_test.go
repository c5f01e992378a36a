package blob_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/blob"
)

func TestCheckKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key  string
		want string // a part of the error message; "" when the key is accepted
	}{
		{"batch.jsonl", ""},
		{"jobs/42/tasks/7/batch-0001.jsonl", ""},
		{"a-b_c.d~e+f=g,h@i:j;k'l(m)n!o&p$q", ""},
		{"dot.in/the.middle/..x/x..", ""},
		{"ünïcödé/批次.jsonl", ""},
		{"spaces are fine", ""},
		{"a.tmp/b", ""},
		{"b.attrs.json", ""},
		{strings.Repeat("k", 1024), ""},

		{"", "is empty"},
		{strings.Repeat("k", 1025), "longer than 1024 bytes"},
		{"bad\xffutf8", "not valid UTF-8"},
		{"/abs", "empty segment"},
		{"trailing/", "empty segment"},
		{"a//b", "empty segment"},
		{".", `"." segment`},
		{"a/./b", `"." segment`},
		{"..", `".." segment`},
		{"../etc/passwd", `".." segment`},
		{"a/../../b", `".." segment`},
		{`a\b`, "backslash"},
		{`..\..\windows`, "backslash"},
		{"a*", "wildcard"},
		{"a?b", "wildcard"},
		{"a[0]", "wildcard"},
		{"a]", "wildcard"},
		{"a%2e%2e", `"%"`},
		{"a#frag", `"#"`},
		{"tab\there", "control character"},
		{"new\nline", "control character"},
		{"nul\x00", "control character"},
		{"del\x7f", "control character"},
		{"c1\u0085", "control character"},
		{"a__0x2f__b", `"__0x"`},
		{"batch.jsonl.18f3a2.tmp", "reserved"},
		{"dir/x.attrs", "reserved"},
	}
	for _, tt := range tests {
		err := blob.CheckKey(tt.key)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckKey(%q) = %v, want nil", tt.key, err)
		case tt.want != "" && err == nil:
			t.Errorf("CheckKey(%q) = nil, want an error saying %q", tt.key, tt.want)
		case tt.want != "" && (!errors.Is(err, blob.ErrOutside) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("CheckKey(%q) = %v, want an error wrapping ErrOutside saying %q", tt.key, err, tt.want)
		}
	}
}

func TestOpenCanonicalRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		url, root string
	}{
		{"file://" + dir + "/store", "file://" + dir + "/store/"},
		{"file://" + dir + "/store/", "file://" + dir + "/store/"},
		{"FILE://" + dir + "/a/../store", "file://" + dir + "/store/"},
		{"s3://bucket", "s3://bucket/"},
		{"s3://bucket/", "s3://bucket/"},
		{"S3://my.bucket-1/some/prefix/", "s3://my.bucket-1/some/prefix/"},
		{"s3://bucket/p?endpoint=http://127.0.0.1:1&region=eu-west-1", "s3://bucket/p/"},
	}
	for _, tt := range tests {
		s, err := blob.Open(t.Context(), tt.url, blob.Options{Endpoint: "http://127.0.0.1:1"})
		if err != nil {
			t.Errorf("Open(%q): %v", tt.url, err)
			continue
		}
		if got := s.Root(); got != tt.root {
			t.Errorf("Open(%q).Root() = %q, want %q", tt.url, got, tt.root)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

// Not parallel: it changes the working directory.
func TestOpenMakesARelativeDirectoryAbsolute(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for url, root := range map[string]string{
		"file://rel/dir": "file://" + dir + "/rel/dir/",
		"file://.":       "file://" + dir + "/",
	} {
		s, err := blob.Open(t.Context(), url, blob.Options{})
		if err != nil {
			t.Fatalf("Open(%q): %v", url, err)
		}
		if got := s.Root(); got != root {
			t.Errorf("Open(%q).Root() = %q, want %q", url, got, root)
		}
		s.Close()
	}
	if _, err := os.Stat(filepath.Join(dir, "rel", "dir")); err != nil {
		t.Errorf("the directory was not created: %v", err)
	}
}

func TestOpenRefusesMalformedURLs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url  string
		want string
	}{
		{"", "want file://DIR or s3://BUCKET"},
		{"/just/a/path", "want file://DIR or s3://BUCKET"},
		{"gs://bucket", "want file://DIR or s3://BUCKET"},
		{"file://", "name a directory"},
		{"file:///tmp/a?b", "may not contain"},
		{"s3://", "bucket name"},
		{"s3://Bucket", "bucket name"},
		{"s3://b", "bucket name"},
		{"s3://bucket:9000", "bucket name"},
		{"s3://-bucket", "bucket name"},
		{"s3://key:secret@bucket", "credentials do not belong in the URL"},
		{"s3://bucket/a//b", "empty segment"},
		{"s3://bucket/a/../b", `".." segment`},
		{"s3://bucket/%61", "percent-encoded"},
		{"s3://bucket/p#f", "fragment"},
		{"s3://bucket?acl=x", "unknown query parameter"},
		{"s3://bucket?region=a&region=b", "given 2 times"},
		{"s3://bucket?endpoint=127.0.0.1:9000", "endpoint"},
		{"s3://bucket?endpoint=http://k:s@127.0.0.1:9000", "credentials do not belong in the endpoint"},
	}
	for _, tt := range tests {
		s, err := blob.Open(t.Context(), tt.url, blob.Options{})
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want an error saying %q", tt.url, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%q) = %v, want an error saying %q", tt.url, err, tt.want)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q) = %v: the error shows the secret", tt.url, err)
		}
	}
}

func TestOpenRefusesHalfCredentials(t *testing.T) {
	t.Parallel()
	_, err := blob.Open(t.Context(), "s3://bucket", blob.Options{Endpoint: "http://127.0.0.1:1", AccessKey: "k"})
	if err == nil || !strings.Contains(err.Error(), "both an access key and a secret key") {
		t.Errorf("Open with an access key alone = %v, want an error asking for both", err)
	}
}

func TestKeyRefusesURIsOutsideTheRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file, err := blob.Open(t.Context(), "file://"+dir, blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	s3, err := blob.Open(t.Context(), "s3://bucket/pre", blob.Options{Endpoint: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()

	tests := []struct {
		store *blob.Store
		uri   string
		want  string // a part of the error message; "" when uri is accepted, then key is its key
		key   string
	}{
		{file, "file://" + dir + "/a/b.jsonl", "", "a/b.jsonl"},
		{file, "FILE://" + dir + "/a", "", "a"},
		{file, "file:" + dir + "/a", "", "a"},
		{s3, "s3://bucket/pre/x/y", "", "x/y"},
		{s3, "S3://bucket/pre/x", "", "x"},

		{file, "file:///etc/passwd", "is not under", ""},
		{file, "file://" + dir + "/../passwd", `".." segment`, ""},
		{file, "file://" + dir + "/a/../../passwd", `".." segment`, ""},
		{file, "file://" + dir + "/./a", `"." segment`, ""},
		{file, "file://" + dir + "/a//b", "empty segment", ""},
		{file, "file://" + dir + "/", "is empty", ""},
		{file, "file://" + dir, "is not under", ""},
		{file, "file://" + dir + "x/a", "is not under", ""},
		{file, "file://localhost" + dir + "/a", "is not under", ""},
		{file, "file://" + dir + `/a\..\b`, "backslash", ""},
		{file, "file://" + dir + "/*", "wildcard", ""},
		{file, "file://" + dir + "/a%2F..", `"%"`, ""},
		{file, "file://" + dir + "/a?x=1", "has a query", ""},
		{file, "file://" + dir + "/a#f", "has a fragment", ""},
		{file, "file://" + dir + "/a\x00", "control character", ""},
		{file, "s3://bucket/pre/x", `has scheme "s3"`, ""},
		{file, dir + "/a", "not a URI", ""},
		{file, "", "not a URI", ""},
		{s3, "file://" + dir + "/a", `has scheme "file"`, ""},
		{s3, "s3://other/pre/x", "is not under", ""},
		{s3, "s3://bucket/x", "is not under", ""},
		{s3, "s3://bucket/prefix/x", "is not under", ""},
		{s3, "s3://bucket/pre/x/../../y", `".." segment`, ""},
		{s3, "https://bucket.s3.amazonaws.com/pre/x", `has scheme "https"`, ""},
	}
	for _, tt := range tests {
		key, err := tt.store.Key(tt.uri)
		switch {
		case tt.want == "" && (err != nil || key != tt.key):
			t.Errorf("Key(%q) = %q, %v; want %q", tt.uri, key, err, tt.key)
		case tt.want != "" && err == nil:
			t.Errorf("Key(%q) = %q, want an error saying %q", tt.uri, key, tt.want)
		case tt.want != "" && (!errors.Is(err, blob.ErrOutside) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("Key(%q) = %v, want an error wrapping ErrOutside saying %q", tt.uri, err, tt.want)
		}
	}
}
