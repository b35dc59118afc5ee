package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Service names: the directories under services/ and the binaries built from them.
const (
	PlannerIngest = "planner-ingest"
	Dispatcher    = "dispatcher"
	Reconciler    = "reconciler"
	Compensator   = "compensator"
)

// Services lists every service binary.
var Services = []string{PlannerIngest, Dispatcher, Reconciler, Compensator}

// builds holds the binaries of this test binary: they are built once, by the
// first test that asks, and shared by every test after it. Package-level
// state is the point: a build per test would cost more than the tests.
var builds struct {
	once sync.Once
	dir  string
	err  error
}

// buildPrefix names the directories the binaries are built into, under
// os.TempDir(); each holds a file "pid" naming the test binary that owns it.
const buildPrefix = "opledger-proctest-"

// Binaries returns the directory holding the four service binaries, built
// from this checkout (go build, using Go's build cache) on the first call in
// this test binary. Directories left by earlier test binaries that are no
// longer running are removed first: a test binary cannot remove its own
// when it exits (testdb.Main ends it with os.Exit).
func Binaries(t testing.TB) string {
	t.Helper()
	builds.once.Do(func() {
		began := time.Now()
		sweepBuilds()
		builds.dir, builds.err = build()
		if builds.err == nil {
			fmt.Fprintf(os.Stderr, "proctest: built %s in %s into %s\n", strings.Join(Services, ", "), time.Since(began).Round(time.Millisecond), builds.dir)
		}
	})
	if builds.err != nil {
		t.Fatalf("proctest: %v", builds.err)
	}
	return builds.dir
}

func build() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", buildPrefix+"*")
	if err != nil {
		return "", fmt.Errorf("build dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return "", fmt.Errorf("build dir: %w", err)
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, s := range Services {
		args = append(args, "./services/"+s)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("go build the services: %w\n%s", err, out)
	}
	return dir, nil
}

// sweepBuilds removes build directories whose test binary has exited.
func sweepBuilds() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), buildPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "pid"))
		if err != nil {
			// Being written right now by another test binary, or not ours:
			// only remove what is clearly stale.
			if fi, serr := os.Stat(d); serr == nil && time.Since(fi.ModTime()) > time.Hour {
				_ = os.RemoveAll(d)
			}
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = os.RemoveAll(d)
		}
	}
}

// repoRoot is the directory holding go.mod, found upwards from the working
// directory (a test runs in its package's directory).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.mod not found above the working directory")
		}
		dir = parent
	}
}
