package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/PID/stat: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// ProcStats are a process's CPU time and peak resident memory, from Linux's /proc.
type ProcStats struct {
	CPUSeconds   float64 // utime + stime
	PeakRSSBytes int64   // VmHWM
}

// ReadProcStats reads the statistics of process pid; it fails where there is no /proc.
func ReadProcStats(pid int) (ProcStats, error) {
	var s ProcStats
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, fmt.Errorf("read the CPU time of process %d: %w", pid, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces and parentheses: the
	// fields after the last ')' start with field 3, so utime (14) and stime (15) are the 12th
	// and 13th of them.
	i := bytes.LastIndexByte(stat, ')')
	fields := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(fields) < 13 {
		return s, fmt.Errorf("read the CPU time of process %d: unexpected /proc/%d/stat %q", pid, pid, stat)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return s, fmt.Errorf("read the CPU time of process %d: unexpected /proc/%d/stat %q", pid, pid, stat)
	}
	s.CPUSeconds = float64(utime+stime) / clockTicks
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("read the peak RSS of process %d: %w", pid, err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return s, fmt.Errorf("read the peak RSS of process %d: unexpected %q", pid, line)
			}
			s.PeakRSSBytes = kb << 10
			return s, nil
		}
	}
	return s, fmt.Errorf("read the peak RSS of process %d: no VmHWM in /proc/%d/status", pid, pid)
}
