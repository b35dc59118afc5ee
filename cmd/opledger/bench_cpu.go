package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuReport is the CPU time the throughput run cost, per operation: the
// bench's own process (the services, the embedded NATS server, the local
// vendors and the bench's client all run in it; in steady mode the NATS
// server runs in a process of its own, counted apart) and the Postgres
// server's processes. Unlike ops/s, CPU time per operation hardly moves when
// something else on the machine takes a core.
type cpuReport struct {
	ProcessMsPerOp float64 `json:"process_ms_per_op"`
	// PostgresMsPerOp is absent when the server's processes cannot be read
	// (a server on another host, or one whose data directory this user
	// cannot read).
	PostgresMsPerOp *float64 `json:"postgres_ms_per_op,omitempty"`
	PostgresWhy     string   `json:"postgres_unread,omitempty"`
	// NATSMsPerOp is the NATS server's process, when it runs in one of its
	// own (steady mode without NATS_URL).
	NATSMsPerOp *float64 `json:"nats_ms_per_op,omitempty"`
}

// totalMsPerOp is the process's, the NATS server's and Postgres's CPU per
// operation, or false when Postgres's is unknown.
func (c *cpuReport) totalMsPerOp() (float64, bool) {
	if c.PostgresMsPerOp == nil {
		return 0, false
	}
	t := c.ProcessMsPerOp + *c.PostgresMsPerOp
	if c.NATSMsPerOp != nil {
		t += *c.NATSMsPerOp
	}
	return t, true
}

func (c *cpuReport) print(w io.Writer, indent string) {
	pg := "Postgres not read (" + c.PostgresWhy + ")"
	if c.PostgresMsPerOp != nil {
		pg = fmt.Sprintf("%.3f ms in Postgres's processes", *c.PostgresMsPerOp)
	}
	if c.NATSMsPerOp != nil {
		fmt.Fprintf(w, "%sCPU per operation: %.3f ms in this process (services, vendors, client), %.3f ms in the NATS server's, %s\n", indent, c.ProcessMsPerOp, *c.NATSMsPerOp, pg)
		return
	}
	fmt.Fprintf(w, "%sCPU per operation: %.3f ms in this process (services, NATS, vendors, client), %s\n", indent, c.ProcessMsPerOp, pg)
}

// cpuSample is CPU time used so far.
type cpuSample struct {
	process, postgres, nats time.Duration
	pgErr                   error
	// natsPid is the NATS server's own process (0: none); natsErr says
	// why its time could not be read.
	natsPid int
	natsErr error
}

// sampleCPU reads this process's CPU time, that of the Postgres server
// whose data directory is dataDir ("" when unknown) and that of the NATS
// server's process natsPid (0: it has none of its own).
func sampleCPU(dataDir string, natsPid int) cpuSample {
	s := cpuSample{natsPid: natsPid}
	if natsPid > 0 {
		s.nats, _, s.natsErr = procCPU(natsPid)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		s.process = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	s.postgres, s.pgErr = postgresCPU(dataDir)
	return s
}

// postgresCPU sums the CPU time of a local Postgres server: its postmaster
// (with the children it has already reaped) and every live child.
func postgresCPU(dataDir string) (time.Duration, error) {
	if dataDir == "" {
		return 0, fmt.Errorf("data directory unknown")
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("no readable postmaster.pid")
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("postmaster.pid unreadable")
	}
	total, _, err := procCPU(pm)
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pm {
			continue
		}
		t, ppid, err := procCPU(pid)
		if err == nil && ppid == pm {
			total += t
		}
	}
	return total, nil
}

// clockTick is Linux's USER_HZ, the unit of /proc/<pid>/stat's times.
const clockTick = 10 * time.Millisecond

// procCPU reads a process's user and system time, its reaped children's
// included, and its parent's pid from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat unreadable", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime..cstime fields 14-17.
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("/proc/%d/stat unreadable", pid)
	}
	ppid, _ := strconv.Atoi(f[1])
	var ticks int64
	for _, s := range f[11:15] {
		n, _ := strconv.ParseInt(s, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * clockTick, ppid, nil
}

// machineCPU reads, from /proc/stat, the CPU time all processes of the
// machine have used (user, nice, system, irq, softirq) and the time of all
// its CPUs (those plus idle, iowait and the time the hypervisor gave to
// others, steal), summed over the CPUs.
func machineCPU() (busy, total time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat unreadable")
	}
	var v [8]int64
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/stat unreadable")
		}
	}
	busyTicks := v[0] + v[1] + v[2] + v[5] + v[6]
	return time.Duration(busyTicks) * clockTick, time.Duration(busyTicks+v[3]+v[4]+v[7]) * clockTick, nil
}

// cpuCost is what the run between two samples cost per operation.
func cpuCost(before, after cpuSample, ops int) *cpuReport {
	per := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(ops) }
	r := &cpuReport{ProcessMsPerOp: per(after.process - before.process)}
	if before.pgErr == nil && after.pgErr == nil {
		v := per(after.postgres - before.postgres)
		r.PostgresMsPerOp = &v
	} else {
		r.PostgresWhy = fmt.Sprint(cmpErr(before.pgErr, after.pgErr))
	}
	if before.natsPid > 0 && before.natsErr == nil && after.natsErr == nil {
		v := per(after.nats - before.nats)
		r.NATSMsPerOp = &v
	}
	return r
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// dataDirectory asks the server for its data directory ("" when it will
// not say: only superusers and pg_read_all_settings may read it).
func (b *bench) dataDirectory(ctx context.Context) string {
	var dir string
	if err := b.db.QueryRow(ctx, benchTag+`SELECT current_setting('data_directory')`).Scan(&dir); err != nil {
		return ""
	}
	return dir
}
