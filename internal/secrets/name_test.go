package secrets

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckNameAcceptsLogicalNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a", "monad_rpc_key", "k8s", "a_1_b_2", "x__", strings.Repeat("a", MaxNameLen)} {
		if err := CheckName(name); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", name, err)
		}
	}
}

func TestCheckNameRefusesOtherNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"", "1abc", "_abc", "Monad_rpc_key", "monad-rpc-key", "monad.rpc", "a b", "é",
		"../x", "a/b", "..", ".", "/etc/passwd", `a\b`, "a\x00b", "abc\n",
		strings.Repeat("a", MaxNameLen+1),
	} {
		err := CheckName(name)
		if !errors.Is(err, ErrInvalidName) {
			t.Errorf("CheckName(%q) = %v, want ErrInvalidName", name, err)
		}
	}
}
