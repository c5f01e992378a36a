package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// forwarded are the signals the init passes on to the program's process group. SIGKILL cannot
// be caught, and needs no passing on: it kills the init, and with it the whole namespace.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP}

// runInit runs the trampoline as the init of a PID namespace of its own, and answers its exit
// code.
//
// The init of a PID namespace (its process 1) is not the program's place: the kernel delivers
// it no signal it has no handler for, so the program would shrug off SIGTERM, and orphans of
// the namespace become its children, whose zombies it must reap. So the init starts the
// trampoline proper as its child, in a process group of its own, which confines itself and
// becomes the program; the init forwards SIGTERM, SIGINT and SIGHUP to that group, reaps
// every child, and once the program has ended tells the server how (on the status descriptor,
// since the wait status of an init cannot carry a signal: it cannot kill itself) and whether
// anything it started still ran, then exits. As it exits the kernel kills everything left in
// the namespace: nothing the program started outlives it.
//
// The init itself holds nothing worth taking: it keeps no limits (so that the program's cap
// on processes cannot starve its runtime of threads), and the program can neither trace it
// (seccomp, and Landlock's scope) nor signal it from inside the namespace but with the
// signals it forwards (nor those where Landlock scopes signals).
func runInit(spec trampolineSpec) int {
	status := os.NewFile(uintptr(spec.Files), "status")
	syscall.CloseOnExec(spec.Files)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	child := spec
	child.Init, child.Files = false, 0
	raw, err := json.Marshal(child)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox: %v\n", err)
		return 126
	}
	files := make([]uintptr, spec.Files)
	for i := range files {
		files[i] = uintptr(i)
	}
	pid, err := syscall.ForkExec(selfExe, []string{"baton-sandbox"}, &syscall.ProcAttr{
		Env:   append([]string{trampolineEnv + "=" + string(raw)}, trampolineEnviron...),
		Files: files,
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox: start the program under its init: %v\n", err)
		return 126
	}
	go func() {
		for sig := range sigs {
			syscall.Kill(-pid, sig.(syscall.Signal))
		}
	}()
	var program syscall.WaitStatus
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "sandbox: wait for the program: %v\n", err)
			return 126
		}
		if got == pid {
			program = ws
			break
		}
	}
	rep := initReport{Status: program, Leftovers: leftovers()}
	if b, err := json.Marshal(rep); err == nil {
		status.Write(b)
	}
	status.Close()
	switch {
	case program.Exited():
		return program.ExitStatus()
	case program.Signaled():
		return 128 + int(program.Signal())
	}
	return 126
}

// leftovers reaps the children that have ended and says whether any still runs.
func leftovers() bool {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil: // ECHILD: none left
			return false
		case got == 0: // children, none of them ended
			return true
		}
	}
}
