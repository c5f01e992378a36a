package sandbox

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Support is what the operating system enforces of a Policy here.
type Support struct {
	// Limits: the resource limits hold.
	Limits bool
	// Landlock is the kernel's Landlock ABI version (0: none): 1 and up confine files, 4 and up
	// TCP too, 6 and up abstract Unix sockets and signals.
	Landlock int
	// Seccomp: the seccomp filter is installed before the program starts.
	Seccomp bool
	// NetworkNamespace: a program without Network or ConnectPorts gets a network namespace of
	// its own.
	NetworkNamespace bool
	// UserNamespace: the program runs in a user namespace of its own, where only its user and
	// group are mapped.
	UserNamespace bool
	// PIDNamespace: the program runs under an init in a PID namespace of its own (unless its
	// Policy says NoPIDNamespace).
	PIDNamespace bool
}

// The isolation levels, each one the one below it and more.
const (
	LevelNone       = "none"       // a process group of its own, and nothing more
	LevelLimits     = "limits"     // resource limits
	LevelLandlock   = "landlock"   // Landlock's rules on files
	LevelSeccomp    = "seccomp"    // the seccomp filter
	LevelNamespaces = "namespaces" // user and PID namespaces of its own
)

// Levels are the isolation levels, lowest first.
var Levels = []string{LevelNone, LevelLimits, LevelLandlock, LevelSeccomp, LevelNamespaces}

// needs says what each level adds to the one below it, for messages.
var needs = map[string]string{
	LevelLimits:     "resource limits",
	LevelLandlock:   "Landlock",
	LevelSeccomp:    "a seccomp filter",
	LevelNamespaces: "user and PID namespaces",
}

// has says whether s has what level adds to the one below it.
func (s Support) has(level string) bool {
	switch level {
	case LevelLimits:
		return s.Limits
	case LevelLandlock:
		return s.Landlock > 0
	case LevelSeccomp:
		return s.Seccomp
	case LevelNamespaces:
		return s.UserNamespace && s.PIDNamespace
	}
	return true
}

// Level is the highest isolation level whose requirements, and those of every level below it,
// hold here.
func (s Support) Level() string {
	level := LevelNone
	for _, l := range Levels[1:] {
		if !s.has(l) {
			break
		}
		level = l
	}
	return level
}

// CheckLevel says whether isolation level have is at least min: an error names an unknown
// level, or what have lacks to reach min.
func CheckLevel(have, min string) error {
	h, m := slices.Index(Levels, have), slices.Index(Levels, min)
	for _, l := range []struct {
		name string
		i    int
	}{{have, h}, {min, m}} {
		if l.i < 0 {
			return fmt.Errorf("unknown isolation level %q: want one of %s", l.name, strings.Join(Levels, ", "))
		}
	}
	if h >= m {
		return nil
	}
	// Only the next level's need is surely missing: a higher one's may hold without it.
	var all []string
	for _, l := range Levels[1 : m+1] {
		all = append(all, needs[l])
	}
	next := Levels[h+1]
	return fmt.Errorf("isolation level %q is below %q: this system lacks %s, which level %q and every level above it need (%q needs %s)",
		have, min, needs[next], next, min, strings.Join(all, ", "))
}

// String says what holds, for a log line.
func (s Support) String() string {
	var out []string
	add := func(ok bool, what string) {
		if !ok {
			what = "no " + what
		}
		out = append(out, what)
	}
	add(s.Limits, "limits")
	if s.Landlock > 0 {
		out = append(out, "landlock v"+strconv.Itoa(s.Landlock))
	} else {
		out = append(out, "no landlock")
	}
	add(s.Seccomp, "seccomp")
	add(s.UserNamespace, "user namespace")
	add(s.PIDNamespace, "PID namespace")
	add(s.NetworkNamespace, "network namespace")
	return "level " + s.Level() + ": " + strings.Join(out, ", ")
}
