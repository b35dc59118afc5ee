package pglocal

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	// tempPrefix names the temp cluster dirs Start creates (and sweeps).
	tempPrefix = "pglocal-"
	// lockName is the file a Cluster holds locked for its lifetime.
	lockName = "pglocal.lock"
	// sweepMinAge protects directories that are still being set up.
	sweepMinAge = time.Minute
)

// sweepStale removes temp cluster dirs left behind by processes that died
// without calling Stop (a test binary hitting -timeout, kill -9): a dir is
// removed only if it is one of ours (pglocal- prefix and a lock file), older
// than a minute, its lock is free and no server still runs in it. Dirs of
// other users are skipped (their lock file cannot be opened). Best effort.
func sweepStale(tmp string, logf func(string, ...any)) {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < sweepMinAge {
			continue
		}
		unlock, err := tryLockExisting(filepath.Join(dir, lockName))
		if err != nil {
			continue // in use, not ours, or not a pglocal dir
		}
		if pid, ok := lockFilePID(filepath.Join(dir, "data", "postmaster.pid")); !ok || !processAlive(pid) {
			if err := os.RemoveAll(dir); err == nil {
				logf("pglocal: removed stale cluster dir %s", dir)
			}
		}
		_ = unlock()
	}
}

// clearStaleLock removes a postmaster.pid or socket lock file left by a
// crashed server whose PID now belongs to an unrelated live process, which
// postgres itself would take for a running server and refuse to start. A
// dead PID is left to postgres, which handles it. If the PID is a server
// running in dataDir, it returns ErrDirInUse.
func clearStaleLock(path, dataDir string, logf func(string, ...any)) error {
	pid, ok := lockFilePID(path)
	if !ok || !processAlive(pid) {
		return nil
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		// No /proc (macOS): cannot tell; postgres will refuse if it is live.
		return nil
	}
	if same, _ := sameFile(cwd, dataDir); same {
		return fmt.Errorf("%w: a postgres server (pid %d) is already running on %s; stop it first (kill -INT %d)",
			ErrDirInUse, pid, dataDir, pid)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pglocal: remove stale %s: %w", path, err)
	}
	logf("pglocal: removed stale %s (pid %d is no longer a postgres server)", path, pid)
	return nil
}

// waitForOldServer waits until no process runs in dataDir any more:
// after a crash (kill -9 of the postmaster), its backends take a moment to
// exit, and until they have, postgres refuses to start ("pre-existing
// shared memory block is still in use"). It needs /proc; elsewhere it
// returns at once. It returns ErrDirInUse if they outlive timeout.
func waitForOldServer(dataDir string, timeout time.Duration, logf func(string, ...any)) error {
	want, err := filepath.EvalSymlinks(dataDir)
	if err != nil {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for waited := false; ; waited = true {
		pids := processesIn(want)
		if len(pids) == 0 {
			if waited {
				logf("pglocal: old server processes in %s have exited", dataDir)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: processes %v of an old server still run in %s; stop them first", ErrDirInUse, pids, dataDir)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processesIn lists the processes whose working directory is dir (postgres
// processes chdir to their data directory), as far as /proc lets us see.
func processesIn(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && cwd == dir {
			pids = append(pids, pid)
		}
	}
	return pids
}

// lockFilePID reads the PID on the first line of a postgres lock file.
func lockFilePID(path string) (int, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

func sameFile(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}
