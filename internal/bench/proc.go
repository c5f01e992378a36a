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

// procInfo is what the bench reads of one process of a worker command's tree.
type procInfo struct {
	pid, ppid, pgid int
	// cpuSeconds is the process's own CPU time and that of the children it waited for (utime,
	// stime, cutime, cstime): a process tree's CPU time is the sum over its live processes.
	cpuSeconds float64
	rssBytes   int64 // VmRSS, 0 for a zombie
	hwmBytes   int64 // VmHWM, 0 for a zombie
}

// readProcInfo reads process pid's parent, group, CPU time and memory from /proc.
func readProcInfo(pid int) (procInfo, error) {
	p := procInfo{pid: pid}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return p, err
	}
	// Fields after the command name's ')' start with field 3 (state): ppid is field 4, pgrp 5,
	// utime 14, stime 15, cutime 16, cstime 17.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return p, fmt.Errorf("unexpected /proc/%d/stat %q", pid, stat)
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 15 {
		return p, fmt.Errorf("unexpected /proc/%d/stat %q", pid, stat)
	}
	var nums [6]int64
	for k, f := range []int{1, 2, 11, 12, 13, 14} {
		if nums[k], err = strconv.ParseInt(fields[f], 10, 64); err != nil {
			return p, fmt.Errorf("unexpected /proc/%d/stat %q", pid, stat)
		}
	}
	p.ppid, p.pgid = int(nums[0]), int(nums[1])
	p.cpuSeconds = float64(nums[2]+nums[3]+nums[4]+nums[5]) / clockTicks
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return p, err
	}
	for line := range strings.Lines(string(status)) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return p, fmt.Errorf("unexpected %q in /proc/%d/status", strings.TrimSpace(line), pid)
		}
		if name == "VmRSS" {
			p.rssBytes = kb << 10
		} else {
			p.hwmBytes = kb << 10
		}
	}
	return p, nil
}

// TreeStats are the figures of a process and its descendants, summed over the processes alive
// when read.
type TreeStats struct {
	Processes int
	// CPUSeconds is the CPU time of the live processes and of the children they waited for.
	CPUSeconds float64
	// RSSBytes is the resident memory now (VmRSS).
	RSSBytes int64
	// PeakRSSBytes sums each process's own peak (VmHWM): for a tree of one process, its peak.
	PeakRSSBytes int64
}

// ReadTreeStats reads the statistics of process root and every process it started, directly or
// not: its descendants and the members of its process group (which keep it when their parent
// exits). It fails where there is no /proc or root no longer runs.
func ReadTreeStats(root int) (TreeStats, error) {
	var s TreeStats
	rootInfo, err := readProcInfo(root)
	if err != nil {
		return s, fmt.Errorf("read the statistics of process %d: %w", root, err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return s, fmt.Errorf("read the statistics of process %d: %w", root, err)
	}
	procs := map[int]procInfo{root: rootInfo}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		p, err := readProcInfo(pid)
		if err != nil {
			continue // gone since the listing, or not readable: not one of ours
		}
		procs[pid] = p
		children[p.ppid] = append(children[p.ppid], pid)
	}
	in := map[int]bool{}
	queue := []int{root}
	for _, p := range procs {
		if p.pgid == rootInfo.pgid && rootInfo.pgid == root { // the group root leads
			queue = append(queue, p.pid)
		}
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if in[pid] {
			continue
		}
		in[pid] = true
		queue = append(queue, children[pid]...)
	}
	for pid := range in {
		p := procs[pid]
		s.Processes++
		s.CPUSeconds += p.cpuSeconds
		s.RSSBytes += p.rssBytes
		s.PeakRSSBytes += p.hwmBytes
	}
	return s, nil
}
