// Package config completes a command's flags from the environment (BATON_<FLAG>) and a YAML
// file of flag values, under the command line's, and prints the result as such a file with its
// secrets redacted: the command line wins, then the environment, then the file, then the
// flag's default. Values go through the flag's own Set, so a value from anywhere is checked alike.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Flag names the flag, and Env the variable, of the configuration file.
const (
	Flag = "config"
	Env  = "BATON_CONFIG"
)

// EnvName is the environment variable of a flag: --internal-listen is BATON_INTERNAL_LISTEN.
func EnvName(flagName string) string {
	return "BATON_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Repeated is a flag that accumulates: each Set adds a value (listFlag). A file gives it a
// list, the environment a comma-separated one.
type Repeated interface {
	flag.Value
	Values() []string
}

// SourceKind is where a flag's effective value came from, as config print names it.
type SourceKind int

const (
	FromDefault SourceKind = iota
	FromFile
	FromEnv
	FromFlag
)

// Source is where a flag's effective value came from.
type Source struct {
	Kind SourceKind
	At   string // FromEnv: the variable; FromFile: FILE:LINE
}

func (s Source) String() string {
	switch s.Kind {
	case FromFlag:
		return "flag"
	case FromEnv:
		return "env " + s.At
	case FromFile:
		return "file " + s.At
	}
	return "default"
}

// Result is what applyConfig did: the file it read ("" for none) and each flag's source.
type Result struct {
	File    string
	FileBy  Source // how the file was named: --config or BATON_CONFIG
	Sources map[string]Source
}

// Errors are all the problems of one command's configuration, one message each.
type Errors []error

func (e Errors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "\n")
}

// Apply sets every flag of fs the command line did not set from its environment variable,
// else from the --config file. fs has been parsed.
func Apply(fs *flag.FlagSet, lookupEnv func(string) (string, bool), commands []string) (*Result, error) {
	res := &Result{Sources: map[string]Source{}}
	fs.Visit(func(f *flag.Flag) { res.Sources[f.Name] = Source{Kind: FromFlag} })
	if _, set := res.Sources[Flag]; set {
		res.File, res.FileBy = fs.Lookup(Flag).Value.String(), Source{Kind: FromFlag}
	} else if v, ok := lookupEnv(Env); ok {
		res.File, res.FileBy = v, Source{Kind: FromEnv, At: Env}
		res.Sources[Flag] = res.FileBy
		if err := fs.Set(Flag, v); err != nil {
			return nil, err
		}
	}
	var errs Errors
	var file map[string]fileValue
	if res.File != "" {
		var err error
		// The keys that are wrong are reported with the values that are.
		if file, err = readFile(fs, res.File, commands); err != nil {
			if list, ok := err.(Errors); ok {
				errs = append(errs, list...)
			} else if res.FileBy.Kind == FromEnv {
				return nil, fmt.Errorf("env %s: %w", Env, err)
			} else {
				return nil, fmt.Errorf("--%s: %w", Flag, err)
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if _, set := res.Sources[f.Name]; set || f.Name == Flag {
			return
		}
		name := EnvName(f.Name)
		if v, ok := lookupEnv(name); ok {
			res.Sources[f.Name] = Source{Kind: FromEnv, At: name}
			vals := []string{v}
			if _, ok := f.Value.(Repeated); ok {
				vals = splitList(v)
			}
			for _, v := range vals {
				if err := fs.Set(f.Name, v); err != nil {
					errs = append(errs, fmt.Errorf("env %s: invalid value %q for --%s: %v%s", name, RedactValue(f.Name, v), f.Name, err, typeHint(f)))
					return
				}
			}
			return
		}
		fv, ok := file[f.Name]
		if !ok {
			res.Sources[f.Name] = Source{Kind: FromDefault}
			return
		}
		res.Sources[f.Name] = Source{Kind: FromFile, At: fmt.Sprintf("%s:%d", res.File, fv.line)}
		for _, v := range fv.values {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fileError{path: res.File, line: fv.line, msg: fmt.Sprintf("%s: invalid value %q: %v%s", f.Name, RedactValue(f.Name, v), err, typeHint(f))})
				return
			}
		}
	})
	if len(errs) > 0 {
		// The environment's problems, then the file's in the order of its lines.
		slices.SortStableFunc(errs, func(a, b error) int {
			var fa, fb fileError
			okA, okB := errors.As(a, &fa), errors.As(b, &fb)
			switch {
			case okA && okB:
				return fa.line - fb.line
			case okA:
				return 1
			case okB:
				return -1
			}
			return 0
		})
		return nil, errs
	}
	return res, nil
}

// splitList splits a repeatable flag's environment value at its commas; empty items are dropped.
func splitList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// typeHint says what a flag of a standard type accepts, after a rejected value.
func typeHint(f *flag.Flag) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case bool:
		return " (want true or false)"
	case int, int64, uint, uint64:
		return " (want an integer)"
	case float64:
		return " (want a number)"
	case time.Duration:
		return " (want a duration such as 30s, 5m or 720h)"
	}
	return ""
}

// fileError is a problem of the configuration file, at a line of it.
type fileError struct {
	path string
	line int
	msg  string
}

func (e fileError) Error() string { return fmt.Sprintf("%s:%d: %s", e.path, e.line, e.msg) }

// fileValue is one key of a configuration file: its values (several only for a repeatable flag)
// and its line.
type fileValue struct {
	values []string
	line   int
}

// readFile reads the YAML mapping of flag names to values at path. Every problem is
// reported, each with its line, as Errors beside the keys that are right.
func readFile(fs *flag.FlagSet, path string, commands []string) (map[string]fileValue, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, nil // an empty file sets nothing
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of flag names to values, such as \"listen: 127.0.0.1:8080\"", path, root.Line)
	}
	out := map[string]fileValue{}
	var errs Errors
	fail := func(n *yaml.Node, format string, a ...any) {
		errs = append(errs, fileError{path: path, line: n.Line, msg: fmt.Sprintf(format, a...)})
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		name := k.Value
		f := fs.Lookup(name)
		switch {
		case k.Kind != yaml.ScalarNode:
			fail(k, "a key must be a flag name")
			continue
		case name == Flag:
			fail(k, "%s: a configuration file cannot name another one", name)
			continue
		case f == nil && v.Kind == yaml.MappingNode && slices.Contains(commands, name):
			fail(k, "unknown key %q: a file has no sections per command, its keys are the flags of %s (give each command a file of its own)", name, fs.Name())
			continue
		case f == nil:
			fail(k, "unknown key %q%s", name, suggestFlag(fs, name))
			continue
		}
		if prev, dup := out[name]; dup {
			fail(k, "%s: given twice (also on line %d)", name, prev.line)
			continue
		}
		_, repeated := f.Value.(Repeated)
		fv := fileValue{line: k.Line}
		switch {
		case v.Kind == yaml.ScalarNode && v.Tag != "!!null":
			fv.values = []string{v.Value}
		case v.Kind == yaml.SequenceNode && repeated:
			for _, item := range v.Content {
				if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
					fail(item, "%s: want a list of values", name)
					continue
				}
				fv.values = append(fv.values, item.Value)
			}
		case v.Kind == yaml.SequenceNode:
			fail(v, "%s: want one value, not a list (--%s is not repeatable)", name, name)
			continue
		case v.Kind == yaml.ScalarNode:
			fail(v, "%s: no value (write \"\" for an empty one)", name)
			continue
		default:
			fail(v, "%s: want a value%s, not a mapping (one file configures one command: keys are its flag names)", name,
				map[bool]string{true: " or a list"}[repeated])
			continue
		}
		out[name] = fv
	}
	if len(errs) > 0 {
		return out, errs
	}
	return out, nil
}

// suggestFlag names the flag of fs closest to an unknown key, when one is close.
func suggestFlag(fs *flag.FlagSet, key string) string {
	best, bestDist := "", len(key)/3+2
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == Flag {
			return
		}
		if d := editDistance(key, f.Name); d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	if best == "" {
		return fmt.Sprintf(" (not a flag of %s)", fs.Name())
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// Print writes the effective configuration of fs as a --config file: every flag with its
// value, its source as a comment, secrets redacted.
func Print(w io.Writer, fs *flag.FlagSet, res *Result) error {
	root := &yaml.Node{Kind: yaml.MappingNode}
	root.HeadComment = fmt.Sprintf("%s: the effective configuration (secrets REDACTED)", fs.Name())
	if res.File != "" {
		root.HeadComment += fmt.Sprintf("\nconfig: %s (%s)", res.File, res.FileBy)
	}
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == Flag {
			return
		}
		key := &yaml.Node{Kind: yaml.ScalarNode, Value: f.Name}
		src := res.Sources[f.Name].String()
		var val *yaml.Node
		if r, ok := f.Value.(Repeated); ok {
			val = &yaml.Node{Kind: yaml.SequenceNode}
			for _, item := range r.Values() {
				val.Content = append(val.Content, scalarNode(f, RedactItem(f.Name, item)))
			}
			if len(val.Content) == 0 {
				val.Style = yaml.FlowStyle
				val.LineComment = src
			} else {
				key.LineComment = src
			}
		} else {
			val = scalarNode(f, RedactValue(f.Name, f.Value.String()))
			val.LineComment = src
		}
		root.Content = append(root.Content, key, val)
	})
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return err
	}
	return enc.Close()
}

// scalarNode is a flag value as YAML: bare for booleans and numbers, a string otherwise (quoted
// when it would read as something else).
func scalarNode(f *flag.Flag, v string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: v, Tag: "!!str"}
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case bool:
			n.Tag = "!!bool"
		case int, int64, uint, uint64:
			n.Tag = "!!int"
		case float64:
			n.Tag = "" // 100 reads as an int, 2.5 as a float: either is a number
		}
	}
	return n
}

// redacted replaces a secret in config print's output.
const redacted = "REDACTED"

// secretWords mark a flag whose value is a secret, by the words of its name. A *tls* flag holds
// a file's path (--internal-tls-key): the path is shown, the key stays in its file.
var secretWords = []string{"secret", "secrets", "password", "passwd", "token", "key", "apikey"}

// SecretFlag reports whether the flag name holds a secret, by the words of its name.
func SecretFlag(name string) bool {
	words := strings.Split(name, "-")
	return !slices.Contains(words, "tls") && slices.ContainsFunc(words, func(w string) bool { return slices.Contains(secretWords, w) })
}

// RedactValue hides the secrets of one flag value: the whole value of a secret flag, the
// credentials inside a URL or a PostgreSQL keyword/value string otherwise.
func RedactValue(name, v string) string {
	if v == "" {
		return v
	}
	if SecretFlag(name) {
		return redacted
	}
	return RedactCredentials(v)
}

// RedactItem hides the secrets of one value of a repeatable flag. NAME=VALUE items keep their
// NAME, and a secret flag's NAME=@FILE its file's path (--push-secret).
func RedactItem(name, item string) string {
	k, v, ok := strings.Cut(item, "=")
	if !ok || k == "" || strings.ContainsAny(k, " /:@") {
		return RedactValue(name, item)
	}
	if SecretFlag(name) && strings.HasPrefix(v, "@") {
		return item
	}
	return k + "=" + RedactValue(name, v)
}

// sensitiveParam reports whether a URL query parameter or a keyword holds a secret.
func sensitiveParam(name string) bool {
	name = strings.ToLower(name)
	for _, w := range []string{"password", "secret", "token", "key", "signature", "credential"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// RedactCredentials hides a URL's password (postgres://u:REDACTED@host), a NATS token
// (nats://REDACTED@host) and secret query parameters (?sslpassword=REDACTED), or the password=
// of a PostgreSQL keyword/value string. Anything else is returned as it is.
func RedactCredentials(v string) string {
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok || scheme == "" || strings.ContainsAny(scheme, " =") {
		return redactKeywords(v)
	}
	// Userinfo: from after :// to the last @ before the path.
	hostEnd := len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		hostEnd = i
	}
	if at := strings.LastIndex(rest[:hostEnd], "@"); at >= 0 {
		user, _, hasPass := strings.Cut(rest[:at], ":")
		switch {
		case hasPass:
			rest = user + ":" + redacted + rest[at:]
		case scheme == "nats" || scheme == "tls" || scheme == "wss":
			rest = redacted + rest[at:] // a NATS token
		}
	}
	if q := strings.Index(rest, "?"); q >= 0 {
		query, frag, hasFrag := strings.Cut(rest[q+1:], "#")
		params := strings.Split(query, "&")
		for i, p := range params {
			if k, _, ok := strings.Cut(p, "="); ok && sensitiveParam(k) {
				params[i] = k + "=" + redacted
			}
		}
		rest = rest[:q+1] + strings.Join(params, "&")
		if hasFrag {
			rest += "#" + frag
		}
	}
	return scheme + "://" + rest
}

// redactKeywords hides password= and the like in a key=value string such as PostgreSQL's
// "host=db user=baton password=secret".
func redactKeywords(v string) string {
	if !strings.Contains(v, "=") || !strings.Contains(v, " ") {
		return v
	}
	fields := strings.Fields(v)
	for i, f := range fields {
		if k, _, ok := strings.Cut(f, "="); ok && sensitiveParam(k) {
			fields[i] = k + "=" + redacted
		}
	}
	return strings.Join(fields, " ")
}
