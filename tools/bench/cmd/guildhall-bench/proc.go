package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// procStat is what the bench reads from /proc/<pid>/stat.
type procStat struct {
	pid, ppid     int
	comm          string
	utime, stime  uint64 // clock ticks
	startTimeTick uint64 // when the process started, in ticks since boot (tells a reused pid apart)
}

// parseProcStat parses the one line of /proc/<pid>/stat (proc(5)). The
// command name is in parentheses and may itself hold spaces and
// parentheses, so the fields are counted from the last ')'.
func parseProcStat(line string) (procStat, error) {
	open := strings.IndexByte(line, '(')
	closing := strings.LastIndexByte(line, ')')
	if open < 1 || closing < open {
		return procStat{}, fmt.Errorf("proc stat: no (comm) in %q", trunc(line, 80))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line[:open]))
	if err != nil {
		return procStat{}, fmt.Errorf("proc stat: pid: %w", err)
	}
	// After ") ": field 3 (state) is rest[0]; field n is rest[n-3].
	rest := strings.Fields(line[closing+1:])
	if len(rest) < 20 {
		return procStat{}, fmt.Errorf("proc stat: %d fields after comm, want >= 20", len(rest))
	}
	num := func(field int) (uint64, error) { return strconv.ParseUint(rest[field-3], 10, 64) }
	ppid, err := num(4)
	if err != nil {
		return procStat{}, fmt.Errorf("proc stat: ppid: %w", err)
	}
	ut, err := num(14)
	if err != nil {
		return procStat{}, fmt.Errorf("proc stat: utime: %w", err)
	}
	st, err := num(15)
	if err != nil {
		return procStat{}, fmt.Errorf("proc stat: stime: %w", err)
	}
	start, err := num(22)
	if err != nil {
		return procStat{}, fmt.Errorf("proc stat: starttime: %w", err)
	}
	return procStat{pid: pid, ppid: int(ppid), comm: line[open+1 : closing], utime: ut, stime: st, startTimeTick: start}, nil
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(string(bytes.TrimSpace(b)))
}

// parseMachineStat returns the busy and total clock ticks of all CPUs from
// the "cpu " line of /proc/stat (busy = user+nice+system+irq+softirq+steal).
func parseMachineStat(content string) (busy, total uint64, err error) {
	for _, line := range strings.Split(content, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != "cpu" {
			continue
		}
		var v [8]uint64
		for i := range v {
			if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
				return 0, 0, fmt.Errorf("/proc/stat: %w", err)
			}
		}
		// user nice system idle iowait irq softirq steal
		busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
		return busy, busy + v[3] + v[4], nil
	}
	return 0, 0, errors.New("/proc/stat: no aggregate cpu line")
}

func machineBusyTicks() uint64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	busy, _, err := parseMachineStat(string(b))
	if err != nil {
		return 0
	}
	return busy
}

// allParents maps every live pid to its parent pid.
func allParents() map[int]int {
	parents := map[int]int{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return parents
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readProcStat(pid); err == nil {
			parents[pid] = st.ppid
		}
	}
	return parents
}

// descendants returns root and every process below it in parents (pid ->
// parent pid), sorted. A root that is not in parents is still returned.
func descendants(root int, parents map[int]int) []int {
	children := map[int][]int{}
	for pid, pp := range parents {
		children[pp] = append(children[pp], pid)
	}
	out := []int{root}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	sort.Ints(out)
	return out
}

// cpuSample is the CPU time used so far by each process of a set, keyed by
// pid and start time so that a reused pid is not taken for the old process.
type cpuSample map[procKey]uint64

type procKey struct {
	pid   int
	start uint64
}

func sampleCPU(pids []int) cpuSample {
	s := cpuSample{}
	for _, pid := range pids {
		if st, err := readProcStat(pid); err == nil {
			s[procKey{pid, st.startTimeTick}] = st.utime + st.stime
		}
	}
	return s
}

// cpuDelta is the CPU time the processes of after used since before: a
// process that started in between counts whole; one that ended in between
// is lost (its time is not visible any more).
func cpuDelta(before, after cpuSample) uint64 {
	var sum uint64
	for k, t := range after {
		if t0, ok := before[k]; ok && t0 <= t {
			sum += t - t0
		} else if !ok {
			sum += t
		}
	}
	return sum
}

// clockTicks is USER_HZ, the unit of /proc's CPU times (100 on every Linux
// that exposes it; getconf says for sure).
func clockTicks() float64 {
	if out, err := exec.Command("getconf", "CLK_TCK").Output(); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && v > 0 {
			return float64(v)
		}
	}
	return 100
}

// parseCPUList parses a kernel CPU list such as "0-3,6" (Cpus_allowed_list).
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("empty cpu list")
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
		}
		if a < 0 || b < a {
			return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// cpusAllowed returns the Cpus_allowed_list line of /proc/<pid>/status, as
// the kernel writes it (for taskset -c).
func cpusAllowed(pid int) (string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			v = strings.TrimSpace(v)
			if _, err := parseCPUList(v); err != nil {
				return "", err
			}
			return v, nil
		}
	}
	return "", fmt.Errorf("pid %d: no Cpus_allowed_list", pid)
}

// onlineCPUs counts the machine's online CPUs (runtime.NumCPU only sees the
// ones this process may run on).
func onlineCPUs() int {
	if b, err := os.ReadFile("/sys/devices/system/cpu/online"); err == nil {
		if cpus, err := parseCPUList(string(b)); err == nil {
			return len(cpus)
		}
	}
	n := 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "processor") {
				n++
			}
		}
	}
	return n
}

// setAffinity pins every thread of pid to cpus (a taskset -c list).
func setAffinity(pid int, cpus string) error {
	out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset -a -p -c %s %d: %v: %s", cpus, pid, err, bytes.TrimSpace(out))
	}
	return nil
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
