package sandbox

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock rights, by the ABI version that introduced them.
const (
	fsV1 = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	fsV2 = unix.LANDLOCK_ACCESS_FS_REFER
	fsV3 = unix.LANDLOCK_ACCESS_FS_TRUNCATE
	fsV5 = unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

	netV4   = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	scopeV6 = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL

	// What a file (not a directory) may be granted.
	fileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		fsV3 | fsV5

	readRights  = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	execRights  = readRights | unix.LANDLOCK_ACCESS_FS_EXECUTE
	writeRights = readRights | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_REG | fsV3
)

// rulesetAttr is struct landlock_ruleset_attr up to ABI 6 (scoped); the kernel takes a prefix
// of it, by size, for older ABIs.
type rulesetAttr struct {
	fs, net, scoped uint64
}

// The rule types of landlock_add_rule, and struct landlock_net_port_attr.
const (
	rulePathBeneath = 1
	ruleNetPort     = 2
)

type netPortAttr struct {
	allowed, port uint64
}

var abi struct {
	once    sync.Once
	version int
}

// landlockABI is the kernel's Landlock ABI version, 0 where it has none (or it is disabled).
func landlockABI() int {
	abi.once.Do(func() {
		v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
		if errno == 0 {
			abi.version = int(v)
		}
	})
	return abi.version
}

// restrict confines the calling thread with Landlock to p (with its Exec files when exec).
// Landlock needs no_new_privs of an unprivileged thread: the caller sets it. Without Landlock it
// does nothing (Supported says so).
func restrict(p Policy, exec bool) error {
	v := landlockABI()
	if v == 0 {
		return nil
	}
	attr := rulesetAttr{fs: fsV1}
	size := unsafe.Offsetof(attr.net) // ABI 1 to 3: the fs field alone
	if v >= 2 {
		attr.fs |= fsV2
	}
	if v >= 3 {
		attr.fs |= fsV3
	}
	if v >= 4 {
		size = unsafe.Offsetof(attr.scoped)
		if !p.Network {
			attr.net = netV4
		}
	}
	if v >= 5 {
		attr.fs |= fsV5
	}
	if v >= 6 {
		attr.scoped = scopeV6
		size = unsafe.Sizeof(attr)
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return fmt.Errorf("sandbox: landlock ruleset: %w", errno)
	}
	defer unix.Close(int(fd))
	addRule := func(kind int, rule unsafe.Pointer) unix.Errno {
		_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, uintptr(kind), uintptr(rule), 0, 0, 0)
		return errno
	}
	add := func(path string, rights uint64) error {
		pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("sandbox: landlock rule for %s: %w", path, err)
		}
		defer unix.Close(pfd)
		var st unix.Stat_t
		if err := unix.Fstat(pfd, &st); err != nil {
			return fmt.Errorf("sandbox: landlock rule for %s: %w", path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			rights &= fileRights
		}
		rule := unix.LandlockPathBeneathAttr{Allowed_access: rights & attr.fs, Parent_fd: int32(pfd)}
		if errno := addRule(rulePathBeneath, unsafe.Pointer(&rule)); errno != 0 {
			return fmt.Errorf("sandbox: landlock rule for %s: %w", path, errno)
		}
		return nil
	}
	for _, path := range p.Read {
		if err := add(path, readRights); err != nil {
			return err
		}
	}
	for _, path := range p.ReadWrite {
		if err := add(path, writeRights); err != nil {
			return err
		}
	}
	if exec {
		for _, path := range p.Exec {
			if err := add(path, execRights); err != nil {
				return err
			}
		}
	}
	if attr.net != 0 {
		for _, port := range p.ConnectPorts {
			rule := netPortAttr{allowed: unix.LANDLOCK_ACCESS_NET_CONNECT_TCP, port: uint64(port)}
			if errno := addRule(ruleNetPort, unsafe.Pointer(&rule)); errno != 0 {
				return fmt.Errorf("sandbox: landlock rule for TCP port %d: %w", port, errno)
			}
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("sandbox: landlock restrict: %w", errno)
	}
	return nil
}
