package docs

import (
	"go/scanner"
	"go/token"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The repository root, seen from this package's directory.
const root = ".."

// TestMarkdownLinksResolve checks every relative link and image of the repository's Markdown
// files: the target file must exist and a #anchor must be a heading (or an HTML id) of the target.
func TestMarkdownLinksResolve(t *testing.T) {
	files := trackedFiles(t, ".md")
	if len(files) == 0 {
		t.Fatal("no Markdown files found")
	}
	anchors := anchorCache{}
	for _, file := range files {
		body, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(body)) {
			if problem := anchors.check(file, l.target); problem != "" {
				t.Errorf("%s:%d: link %q: %s", file, l.line, l.target, problem)
			}
		}
	}
}

// TestGoCommentCitationsResolve checks the docs/….md[#anchor] citations in Go comments, paths
// relative to the repository root.
func TestGoCommentCitationsResolve(t *testing.T) {
	anchors := anchorCache{}
	for _, file := range trackedFiles(t, ".go") {
		src, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		var s scanner.Scanner
		s.Init(fset.AddFile(file, -1, len(src)), src, nil, scanner.ScanComments)
		for {
			pos, tok, lit := s.Scan()
			if tok == token.EOF {
				break
			}
			if tok != token.COMMENT {
				continue
			}
			for _, m := range docCitation.FindAllStringSubmatchIndex(lit, -1) {
				target := lit[m[2]:m[3]]
				line := fset.Position(pos).Line + strings.Count(lit[:m[2]], "\n")
				if problem := anchors.check("", target); problem != "" {
					t.Errorf("%s:%d: citation %q: %s", file, line, target, problem)
				}
			}
		}
	}
}

// docCitation finds a citation of a page under docs/ (its .md path from the root, with an optional
// #anchor) in a comment, not as the tail of a longer path or of a URL.
var docCitation = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])(docs/[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md(?:#[A-Za-z0-9_-]+)?)`)

// trackedFiles lists the repository's files with the extension, slash-separated and relative to
// the root: git's tracked files when git can say, otherwise every file outside hidden and
// testdata directories.
func trackedFiles(t *testing.T, ext string) []string {
	t.Helper()
	var files []string
	if out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--", "*"+ext).Output(); err == nil {
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" && strings.HasSuffix(f, ext) {
				if _, err := os.Stat(filepath.Join(root, f)); err == nil { // deleted but not yet committed
					files = append(files, f)
				}
			}
		}
		return files
	}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ext) {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// anchorCache checks targets, reading each Markdown file's anchors once.
type anchorCache map[string][]string

// check resolves target as written in the file from (slash-separated, relative to the root; "" for
// a path relative to the root itself) and says what is wrong with it, or "" when it resolves.
// Targets with a scheme are not checked.
func (c anchorCache) check(from, target string) string {
	if target == "" || hasScheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return ""
	}
	p, anchor, _ := strings.Cut(target, "#")
	p, _, _ = strings.Cut(p, "?")
	if unescaped, err := url.PathUnescape(p); err == nil {
		p = unescaped
	}
	var file string
	switch {
	case p == "" && from == "":
		return "no file to find the anchor in"
	case p == "":
		file = from
	case strings.HasPrefix(p, "/"):
		file = path.Clean(strings.TrimPrefix(p, "/"))
	default:
		file = path.Clean(path.Join(path.Dir(from), p))
	}
	if file == ".." || strings.HasPrefix(file, "../") {
		return "points outside the repository"
	}
	info, err := os.Stat(filepath.Join(root, filepath.FromSlash(file)))
	if err != nil {
		return "no such file: " + file
	}
	if anchor == "" || info.IsDir() || !strings.HasSuffix(file, ".md") {
		return ""
	}
	return c.checkAnchor(file, anchor)
}

func (c anchorCache) checkAnchor(file, anchor string) string {
	anchors, ok := c[file]
	if !ok {
		body, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			return err.Error()
		}
		anchors = markdownAnchors(string(body))
		c[file] = anchors
	}
	if slices.Contains(anchors, strings.ToLower(anchor)) || slices.Contains(anchors, anchor) {
		return ""
	}
	return "no heading with anchor #" + anchor + " in " + file
}

var hasScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// link is one link target of a Markdown file and its line.
type link struct {
	line   int
	target string
}

var (
	fence       = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	inlineLink  = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	refDef      = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	htmlHref    = regexp.MustCompile(`(?i)<(?:a|img)\s[^>]*?(?:href|src)\s*=\s*["']([^"']*)["']`)
	htmlID      = regexp.MustCompile(`(?i)<[a-z][a-z0-9]*\s[^>]*?(?:id|name)\s*=\s*["']([^"']*)["']`)
	atxHeading  = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextUnder = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
)

// markdownLinks returns the targets of a Markdown document's inline links and images, reference
// definitions and HTML <a href>/<img src>, skipping fenced code blocks and code spans. A link to
// an anchor of the document itself comes back as "#anchor".
func markdownLinks(doc string) []link {
	var links []link
	for i, line := range codeFreeLines(doc) {
		if line == "" {
			continue
		}
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := refDef.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, m := range htmlHref.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			target = strings.TrimSuffix(strings.TrimPrefix(target, "<"), ">")
			links = append(links, link{line: i + 1, target: target})
		}
	}
	return links
}

// codeFreeLines splits doc into lines with fenced code blocks blanked and code spans removed, so
// that line numbers are kept.
func codeFreeLines(doc string) []string {
	lines := strings.Split(doc, "\n")
	open := ""
	for i, line := range lines {
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case open == "":
				open = m[1]
				lines[i] = ""
				continue
			case m[1][0] == open[0] && len(m[1]) >= len(open) && strings.TrimSpace(line) == m[1]:
				open = ""
				lines[i] = ""
				continue
			}
		}
		if open != "" {
			lines[i] = ""
			continue
		}
		lines[i] = stripCodeSpans(line)
	}
	return lines
}

// stripCodeSpans removes `code` and “code“ spans from one line.
func stripCodeSpans(line string) string {
	var b strings.Builder
	for {
		start := strings.IndexByte(line, '`')
		if start < 0 {
			b.WriteString(line)
			return b.String()
		}
		n := 0
		for start+n < len(line) && line[start+n] == '`' {
			n++
		}
		ticks := line[start : start+n]
		end := -1
		for from := start + n; from < len(line); {
			j := strings.Index(line[from:], ticks)
			if j < 0 {
				break
			}
			j += from
			if j+n < len(line) && line[j+n] == '`' { // a longer run does not close it
				for j < len(line) && line[j] == '`' {
					j++
				}
				from = j
				continue
			}
			end = j
			break
		}
		if end < 0 { // unmatched backticks are literal
			b.WriteString(line[:start+n])
			line = line[start+n:]
			continue
		}
		b.WriteString(line[:start])
		b.WriteString(" ")
		line = line[end+n:]
	}
}

// markdownAnchors returns the anchors of a document: its headings' slugs, with GitHub's -1, -2
// suffixes for repeats, and the ids and names of its HTML elements.
func markdownAnchors(doc string) []string {
	seen := map[string]bool{}
	var anchors []string
	add := func(heading string) {
		base := slug(heading)
		s := base
		for i := 1; seen[s]; i++ {
			s = base + "-" + strconv.Itoa(i)
		}
		seen[s] = true
		anchors = append(anchors, s)
	}
	lines := strings.Split(doc, "\n")
	open := ""
	prev := ""
	for _, line := range lines {
		if m := fence.FindStringSubmatch(line); m != nil {
			if open == "" {
				open = m[1]
			} else if m[1][0] == open[0] && len(m[1]) >= len(open) && strings.TrimSpace(line) == m[1] {
				open = ""
			}
			prev = ""
			continue
		}
		if open != "" {
			continue
		}
		switch {
		case atxHeading.MatchString(line):
			add(atxHeading.FindStringSubmatch(line)[2])
			prev = ""
			continue
		case setextUnder.MatchString(line) && isParagraphText(prev):
			add(strings.TrimSpace(prev))
			prev = ""
			continue
		}
		for _, m := range htmlID.FindAllStringSubmatch(line, -1) {
			anchors = append(anchors, m[1])
		}
		prev = line
	}
	return anchors
}

// isParagraphText reports whether line can be the text of a setext heading: not blank, not a
// list item, quote, table row or indented code.
func isParagraphText(line string) bool {
	t := strings.TrimSpace(line)
	if t == "" || strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t") {
		return false
	}
	for _, p := range []string{"- ", "* ", "+ ", ">", "|"} {
		if strings.HasPrefix(t, p) {
			return false
		}
	}
	return !orderedItem.MatchString(t)
}

var orderedItem = regexp.MustCompile(`^\d+[.)] `)

var (
	mdImage    = regexp.MustCompile(`!\[([^\]]*)\]\([^)]*\)`)
	mdLink     = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
	emphasis   = regexp.MustCompile(`(^|[^\pL\pN_])[_*]+|[_*]+([^\pL\pN_]|$)`)
	codeInText = regexp.MustCompile("(`+)(.*?)(`+)")
)

// slug is GitHub's anchor of a heading: the heading's rendered text (code spans keep their
// content, links their text, emphasis markers and HTML tags go), lower-cased, with every
// character that is not a letter, digit, mark, '_', '-' or space dropped and each space turned
// into '-'.
func slug(heading string) string {
	// Code spans are rendered verbatim: protect their content from the emphasis rule.
	var codes []string
	text := codeInText.ReplaceAllStringFunc(heading, func(s string) string {
		m := codeInText.FindStringSubmatch(s)
		codes = append(codes, strings.TrimSpace(m[2]))
		return "\x00" + strconv.Itoa(len(codes)-1) + "\x00"
	})
	text = mdImage.ReplaceAllString(text, "$1")
	text = mdLink.ReplaceAllString(text, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	for emphasis.MatchString(text) {
		next := emphasis.ReplaceAllString(text, "$1$2")
		if next == text {
			break
		}
		text = next
	}
	for i, c := range codes {
		text = strings.ReplaceAll(text, "\x00"+strconv.Itoa(i)+"\x00", c)
	}
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Quickstart", "quickstart"},
		{"The producer API", "the-producer-api"},
		{"Benchmarks: `baton bench`", "benchmarks-baton-bench"},
		{"Production: `baton server` on PostgreSQL", "production-baton-server-on-postgresql"},
		{"Wake-up transports: Redis Streams, NATS JetStream", "wake-up-transports-redis-streams-nats-jetstream"},
		{"Object storage: each task reaches only its own prefixes", "object-storage-each-task-reaches-only-its-own-prefixes"},
		{"Heartbeats and expiry", "heartbeats-and-expiry"},
		{"Job status and resume", "job-status-and-resume"},
		{"`POST /jobs/{jobId}/tasks`", "post-jobsjobidtasks"},
		{"`max_wait_ms` and `lease_token`", "max_wait_ms-and-lease_token"},
		{"snake_case stays", "snake_case-stays"},
		{"*Emphasis* and __strong__", "emphasis-and-strong"},
		{"A [link](other.md) in a heading", "a-link-in-a-heading"},
		{"Errors (4xx & 5xx)", "errors-4xx--5xx"},
		{"What's new?", "whats-new"},
		{"  Spaces   inside  ", "spaces---inside"},
		{"Ünïcode Überschrift", "ünïcode-überschrift"},
		{"v1.2 — the dash", "v12--the-dash"},
		{"HTML <code>tag</code>", "html-tag"},
	} {
		if got := slug(c.heading); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

func TestMarkdownAnchors(t *testing.T) {
	doc := "# Title\n\n## Usage\n\ntext\n\n## Usage\n\n```sh\n# not a heading\n```\n\n## Usage\n\n" +
		"Setext\n------\n\n- list\n---\n\n<a id=\"custom\"></a>\n### Closing hashes ##\n"
	want := []string{"title", "usage", "usage-1", "usage-2", "setext", "custom", "closing-hashes"}
	if got := markdownAnchors(doc); !slices.Equal(got, want) {
		t.Errorf("anchors %q, want %q", got, want)
	}
}

func TestMarkdownLinks(t *testing.T) {
	doc := "See [a](a.md) and ![img](pic.png \"title\") and [b](<b c.md>).\n" +
		"Code: `[not](x.md)` and ``[not](y.md)``.\n" +
		"```\n[not](z.md)\n```\n" +
		"~~~~\n[not](w.md)\n~~~~\n" +
		"[![badge](badge.svg)](https://example.com) [mail](mailto:a@b.c) [same](#usage)\n" +
		"[ref]: ref.md\n" +
		"<a href=\"html.md#x\">html</a>\n"
	var got []string
	for _, l := range markdownLinks(doc) {
		got = append(got, strconv.Itoa(l.line)+":"+l.target)
	}
	want := []string{"1:a.md", "1:pic.png", "1:b c.md", "9:badge.svg", "9:https://example.com", "9:mailto:a@b.c", "9:#usage", "10:ref.md", "11:html.md#x"}
	if !slices.Equal(got, want) {
		t.Errorf("links %q, want %q", got, want)
	}
}

// TestNoCitationsOutsideTheRepository fails when a tracked text file names a document that is not
// in the repository: the design notes and the original contracts the project started from. What
// the project needs from them lives under docs/, in its own words. (The pattern is built from
// parts so that this file does not match itself.)
func TestNoCitationsOutsideTheRepository(t *testing.T) {
	outside := regexp.MustCompile(`(?i)` + strings.Join([]string{`seed[ -]?0\d\d`, `DESIGN` + `\.md`, `\.\./` + `shared`}, "|"))
	for _, ext := range []string{".go", ".md", ".json", ".yaml", ".yml", ".sh", ".sql", ".txt"} {
		for _, file := range trackedFiles(t, ext) {
			body, err := os.ReadFile(filepath.Join(root, file))
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(body), "\n") {
				if m := outside.FindString(line); m != "" {
					t.Errorf("%s:%d: names %q, a document outside the repository", file, i+1, m)
				}
			}
		}
	}
}
