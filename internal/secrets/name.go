package secrets

import (
	"errors"
	"fmt"
)

// MaxNameLen is the longest logical name a secret may have.
const MaxNameLen = 128

// ErrInvalidName is the answer for a logical name that is not one (see CheckName).
var ErrInvalidName = errors.New("invalid secret name")

// CheckName reports whether name is a secret's logical name, as DAG documents declare them
// (monad_rpc_key): lowercase ASCII letters, digits and underscores, starting with a letter, at
// most MaxNameLen characters. Such a name is safe as a file name and in an environment variable's
// name, so providers check it before they touch either. The error wraps ErrInvalidName.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w %q…: longer than %d characters", ErrInvalidName, name[:MaxNameLen], MaxNameLen)
	case name[0] < 'a' || name[0] > 'z':
		return fmt.Errorf("%w %q: must start with a lowercase letter", ErrInvalidName, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return fmt.Errorf("%w %q: only lowercase letters, digits and underscores are allowed", ErrInvalidName, name)
		}
	}
	return nil
}
