package sandbox

import (
	"fmt"
	"sync"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// refused are the system calls a contained program gets EPERM for: those that reach beyond
// its own process (tracing or reading another's memory), make or enter namespaces, mount,
// load BPF programs or kernel modules, touch the kernel's keyrings, the clock, swap, the boot,
// the kernel log or accounting, open files by handle (past Landlock's paths), or hand it
// another's file descriptors. Most need privileges the program lacks anyway; refused, they
// are no surface either, in its user namespace where it may be root.
var refused = []string{
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
	"unshare", "setns",
	"mount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount", "open_tree",
	"fsopen", "fsconfig", "fsmount", "fspick",
	"bpf", "perf_event_open", "userfaultfd",
	"keyctl", "add_key", "request_key",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"swapon", "swapoff", "reboot", "syslog", "acct", "quotactl", "quotactl_fd",
	"open_by_handle_at", "name_to_handle_at", "lookup_dcookie",
	"iopl", "ioperm", "uselib", "move_pages",
	"settimeofday", "clock_settime", "adjtimex", "clock_adjtime",
}

// namespaceFlags are clone's flags that make a new namespace: a clone with any is refused.
const namespaceFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP

// Personalities a program may ask for: Linux's own (0), and none (0xffffffff, which the kernel
// reads as an unsigned int: -1 too), which reads the current one. Others turn address space
// randomization off or emulate other systems.
const (
	personalityLinux   = 0
	personalityQuery   = 0xffffffff
	personalityQuery64 = 0xffffffffffffffff
)

// policy is the seccomp policy on this machine's system calls, those it has among refused.
// clone3 gets ENOSYS, not EPERM: its flags are in memory, out of a filter's reach, and ENOSYS
// makes the C library fall back to clone, whose flags the filter checks.
func policy(info *arch.Info) seccomp.Policy {
	var names []string
	for _, name := range refused {
		if _, ok := info.SyscallNames[name]; ok {
			names = append(names, name)
		}
	}
	errno := func(e unix.Errno) seccomp.Action { return seccomp.ActionErrno | seccomp.Action(e) }
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Names: names, Action: errno(unix.EPERM)},
			{Names: []string{"clone3"}, Action: errno(unix.ENOSYS)},
			{NamesWithCondtions: []seccomp.NameWithConditions{
				{Name: "clone", Conditions: seccomp.ArgumentConditions{
					{Argument: 0, Operation: seccomp.BitsSet, Value: namespaceFlags}}},
				{Name: "personality", Conditions: seccomp.ArgumentConditions{
					{Argument: 0, Operation: seccomp.NotEqual, Value: personalityLinux},
					{Argument: 0, Operation: seccomp.NotEqual, Value: personalityQuery},
					{Argument: 0, Operation: seccomp.NotEqual, Value: personalityQuery64}}},
			}, Action: errno(unix.EPERM)},
		},
	}
}

// seccompProgram assembles the filter: the policy, behind a check of the calling convention.
// The policy's own check lets a system call of another convention through (the policy's
// default); a filter that refuses by name must refuse those instead (ENOSYS): the numbers of
// i386's calls, made with int 0x80 on x86-64, are not x86-64's.
func seccompProgram() ([]unix.SockFilter, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("sandbox: seccomp: %w", err)
	}
	p := policy(info)
	insts, err := p.Assemble()
	if err != nil {
		return nil, fmt.Errorf("sandbox: seccomp: %w", err)
	}
	const archOffset = 4 // of struct seccomp_data's arch
	insts = append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: archOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
	}, insts...)
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("sandbox: seccomp: %w", err)
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// installSeccomp installs filter on the calling thread, which has no_new_privs set. Without
// seccomp it does nothing (Supported says so).
func installSeccomp(filter []unix.SockFilter) error {
	if !seccompUsable() {
		return nil
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("sandbox: seccomp: %w", errno)
	}
	return nil
}

var seccompProbe struct {
	once   sync.Once
	usable bool
}

// seccompUsable says whether the kernel filters system calls with seccomp, with the actions
// the filter takes, and this machine's calling convention is one the filter knows.
func seccompUsable() bool {
	seccompProbe.once.Do(func() {
		if _, err := arch.GetInfo(""); err != nil {
			return
		}
		action := uint32(unix.SECCOMP_RET_ERRNO)
		_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action)))
		seccompProbe.usable = errno == 0
	})
	return seccompProbe.usable
}
