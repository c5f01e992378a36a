package sandbox

import (
	"strings"
	"testing"
)

func TestLevels(t *testing.T) {
	for _, c := range []struct {
		s    Support
		want string
	}{
		{Support{}, LevelNone},
		{Support{Limits: true, Seccomp: true}, LevelLimits},
		{Support{Limits: true, Landlock: 1, UserNamespace: true, PIDNamespace: true}, LevelLandlock},
		{Support{Limits: true, Landlock: 3, Seccomp: true, UserNamespace: true}, LevelSeccomp},
		{Support{Limits: true, Landlock: 7, Seccomp: true, UserNamespace: true, PIDNamespace: true}, LevelNamespaces},
	} {
		if got := c.s.Level(); got != c.want {
			t.Errorf("%s: level %s, want %s", c.s, got, c.want)
		}
	}
	if err := CheckLevel(LevelSeccomp, LevelLandlock); err != nil {
		t.Error(err)
	}
	if err := CheckLevel(LevelLimits, LevelNamespaces); err == nil || !strings.Contains(err.Error(), "lacks Landlock") {
		t.Errorf("limits below namespaces: %v", err)
	}
	if err := CheckLevel(LevelLimits, "max"); err == nil || !strings.Contains(err.Error(), "none, limits, landlock, seccomp, namespaces") {
		t.Errorf("an unknown level: %v", err)
	}
}
