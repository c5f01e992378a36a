package bundle

import (
	"fmt"
	"path/filepath"
	"strings"
)

// EntryFile resolves a job's entrypoint against the manifest: "" means the manifest's. Either a
// file of the bundle (run as a program), or, for python and node, a handler "module.function"
// (module path with slashes allowed, e.g. "pkg/trace.handler") whose module is a file of the
// bundle: python MODULE.py (a dotted module, "pkg.trace.handler", is read as pkg/trace.py);
// node MODULE.js, MODULE.mjs or MODULE.cjs (first found). Handler is "" for a program. Any other
// entrypoint is an *Error saying which files it looked for.
func (m *Manifest) EntryFile(entrypoint string) (file, handler string, err error) {
	if entrypoint == "" {
		entrypoint = m.Entrypoint
	}
	if _, ok := m.file(entrypoint); ok {
		return entrypoint, "", nil
	}
	if m.Runtime != Python && m.Runtime != Node {
		return "", "", &Error{Path: "entrypoint", Reason: fmt.Sprintf("%q is not a file of the bundle", entrypoint)}
	}
	i := strings.LastIndexByte(entrypoint, '.')
	if i <= 0 || !isFuncName(entrypoint[i+1:], m.Runtime) || pathProblem(entrypoint[:i]) != "" {
		return "", "", &Error{Path: "entrypoint", Reason: fmt.Sprintf(
			"%q is neither a file of the bundle nor a handler module.function (e.g. app.handler)", entrypoint)}
	}
	module, handler := entrypoint[:i], entrypoint[i+1:]
	candidates := moduleFiles(m.Runtime, module)
	for _, c := range candidates {
		if _, ok := m.file(c); ok {
			return c, handler, nil
		}
	}
	return "", "", &Error{Path: "entrypoint", Reason: fmt.Sprintf(
		"%q is not a file of the bundle, nor a handler whose module is one: looked for %s", entrypoint, strings.Join(candidates, ", "))}
}

// moduleFiles are the files, in the order looked for, that may hold a handler's module.
func moduleFiles(runtime, module string) []string {
	if runtime == Python {
		return []string{strings.ReplaceAll(module, ".", "/") + ".py"}
	}
	return []string{module + ".js", module + ".mjs", module + ".cjs"}
}

// isFuncName reports whether s can name a function of a module in the runtime: an ASCII
// identifier, which may hold "$" in JavaScript.
func isFuncName(s, runtime string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' || c == '$' && runtime == Node
		if !ok {
			return false
		}
	}
	return true
}

// Command is the argument vector that starts the bundle extracted in dir with entrypoint (as
// EntryFile resolves it): python3 FILE, node FILE, or DIR/FILE for binary; for a handler,
// python3 -c <shim> / node -e <shim>, a shim that calls it as AWS Lambda would. The command's
// working directory is not dir (it is the task's own work directory); paths in the vector are
// absolute.
func Command(dir string, m *Manifest, entrypoint string) ([]string, error) {
	file, handler, err := m.EntryFile(entrypoint)
	if err != nil {
		return nil, err
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("bundle: command: %w", err)
	}
	path := filepath.Join(root, filepath.FromSlash(file))
	switch {
	case m.Runtime == Binary:
		return []string{path}, nil
	case m.Runtime == Python && handler == "":
		return []string{"python3", path}, nil
	case m.Runtime == Node && handler == "":
		return []string{"node", path}, nil
	case m.Runtime == Python:
		module := strings.ReplaceAll(strings.TrimSuffix(file, ".py"), "/", ".")
		return []string{"python3", "-c", pythonShim, root, module, handler}, nil
	case m.Runtime == Node:
		return []string{"node", "-e", nodeShim, path, handler}, nil
	}
	return nil, &Error{Path: "runtime", Reason: fmt.Sprintf("%q is not a runtime this server runs", m.Runtime)}
}
