// Package pglocal runs a private PostgreSQL cluster for dev mode, tests and
// benchmarks, using nothing but the PostgreSQL server binaries.
//
// The cluster never opens a TCP port: it listens only on a unix socket in its
// own directory (see [Cluster.SocketDir]), so it cannot collide with a
// system PostgreSQL on 5432. The socket is mode 0700 and authentication is
// trust, so only the server's OS user (and root) can connect.
//
// When the calling process runs as root, initdb and postgres (which refuse to
// run as root) run as the unprivileged OS user "postgres".
//
// A cluster directory holds:
//
//	data/            the data directory (PGDATA)
//	sock/            the socket directory (.s.PGSQL.<port>)
//	postgres.log     the server log of the current run (postgres.log.1: previous run)
//	initdb.log       initdb's output
//	pglocal.lock     held (flock) while a Cluster uses the directory
package pglocal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinel errors. Errors returned by this package wrap them where they apply.
var (
	// ErrInvalidOption is returned by Start when Options are not usable.
	ErrInvalidOption = errors.New("pglocal: invalid option")
	// ErrBinariesNotFound is returned by BinDir (and Start) when no directory
	// with the PostgreSQL server binaries (initdb, postgres) can be found.
	ErrBinariesNotFound = errors.New("pglocal: PostgreSQL server binaries not found")
	// ErrDirInUse is returned by Start when another process already runs a
	// cluster in Options.Dir.
	ErrDirInUse = errors.New("pglocal: cluster directory in use")
	// ErrUnsupported is returned by Start on platforms pglocal cannot run on.
	ErrUnsupported = errors.New("pglocal: unsupported platform")
)

const (
	// DefaultPort names the socket file when Options.Port is 0. No TCP port
	// is opened, so it cannot collide with anything outside the socket dir.
	DefaultPort = 5433
	// DefaultMaxConnections is max_connections unless ExtraSettings says
	// otherwise: test suites and benchmarks open many connections.
	DefaultMaxConnections = 200
	// superuser is the role initdb creates (-U); trust auth on the socket.
	superuser = "postgres"
	// defaultStartTimeout bounds Start when ctx has no deadline. Generous
	// because a reused dev cluster may need crash recovery.
	defaultStartTimeout = 2 * time.Minute
	// stopTimeout bounds each escalation step of Stop.
	stopTimeout = 30 * time.Second
	// maxSocketPath is the usable length of sun_path (104 on BSDs/macOS,
	// 108 on Linux, minus the terminating NUL).
	maxSocketPath = 103
)

// Options configure Start. The zero value is a throwaway test cluster.
type Options struct {
	// Dir is the cluster directory (data + socket + logs). "" creates a new
	// temporary directory, removed by Stop: under os.TempDir(), except that
	// a non-Durable cluster goes to /dev/shm when TMPDIR is unset and
	// /dev/shm is a tmpfs with at least 1 GiB free (creating databases on a
	// fresh disk directory can be ten times slower). A Dir that
	// already holds an initialised cluster is reused (dev-mode restarts keep
	// their data) and is never removed. Missing parents are created 0755.
	// When running as root, Dir and Dir/sock are chowned to the postgres
	// user, and every parent of Dir must be enterable by it (t.TempDir() is
	// not: it is 0700 root).
	Dir string
	// Port only names the socket file (.s.PGSQL.<port>); no TCP listener is
	// opened. 0 means DefaultPort.
	Port int
	// Durable keeps PostgreSQL's durability defaults (dev mode, benchmarks
	// of real durability), and initdb syncs its files. false (tests) sets
	// fsync, synchronous_commit and full_page_writes off and runs initdb
	// --no-sync: fast, but a machine crash can corrupt the data.
	Durable bool
	// Logf, if set, receives progress lines (initdb, start, stop, timings).
	Logf func(format string, args ...any)
	// ExtraSettings are server settings passed as -c name=value, applied
	// after pglocal's own (so max_connections, shared_buffers, … can be
	// overridden). listen_addresses, port and unix_socket_directories are
	// controlled by pglocal and rejected here.
	ExtraSettings map[string]string
}

var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

func (o Options) validate() error {
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("%w: Port %d out of range 0..65535", ErrInvalidOption, o.Port)
	}
	for k, v := range o.ExtraSettings {
		if !settingName.MatchString(k) {
			return fmt.Errorf("%w: ExtraSettings key %q is not a setting name", ErrInvalidOption, k)
		}
		switch strings.ToLower(k) {
		case "listen_addresses", "port", "unix_socket_directories":
			return fmt.Errorf("%w: ExtraSettings may not set %s (pglocal listens only on its own unix socket)", ErrInvalidOption, k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%w: ExtraSettings[%q] contains a NUL byte", ErrInvalidOption, k)
		}
	}
	return nil
}

// Cluster is a running private PostgreSQL server. Its methods are safe for
// concurrent use.
type Cluster struct {
	dir, dataDir, sockDir, logPath string
	port                           int
	removeDir                      bool // Dir was a temp dir we created
	logf                           func(string, ...any)

	cmd     *exec.Cmd
	logFile *os.File
	unlock  func() error

	exited  chan struct{} // closed when the server process has exited
	waitErr error         // cmd.Wait's result; read after exited is closed

	stopOnce sync.Once
	stopErr  error
}

// Start initialises the cluster directory if needed (initdb), starts the
// server and waits until it accepts connections. It creates no databases or
// roles beyond initdb's: the superuser "postgres" and the database "postgres".
//
// If ctx has no deadline, Start gives up after two minutes. Cancelling ctx
// after Start has returned does not affect the server; call Stop.
//
// Errors wrap ErrInvalidOption, ErrBinariesNotFound, ErrDirInUse or
// ErrUnsupported where they apply; a server that fails to start is reported
// with the tail of its log.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	acct, err := serverAccount()
	if err != nil {
		return nil, err
	}

	c := &Cluster{port: opts.Port, logf: logf, exited: make(chan struct{})}
	if c.port == 0 {
		c.port = DefaultPort
	}
	// Undo whatever was set up if Start fails part-way.
	defer func() {
		if err != nil {
			c.abort()
		}
	}()

	if opts.Dir == "" {
		parent := os.TempDir()
		if _, set := os.LookupEnv("TMPDIR"); !set && !opts.Durable {
			if d := memTempDir(); d != "" {
				parent = d
			}
		}
		sweepStale(parent, logf)
		if c.dir, err = os.MkdirTemp(parent, tempPrefix); err != nil {
			return nil, fmt.Errorf("pglocal: create temp dir: %w", err)
		}
		c.removeDir = true
	} else {
		if c.dir, err = filepath.Abs(opts.Dir); err != nil {
			return nil, fmt.Errorf("pglocal: %w", err)
		}
		if err = os.MkdirAll(c.dir, 0o755); err != nil {
			return nil, fmt.Errorf("pglocal: create cluster dir: %w", err)
		}
	}
	c.dataDir = filepath.Join(c.dir, "data")
	c.sockDir = filepath.Join(c.dir, "sock")
	c.logPath = filepath.Join(c.dir, "postgres.log")

	if c.unlock, err = lockDir(filepath.Join(c.dir, lockName)); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrDirInUse, c.dir, err)
	}
	if _, statErr := os.Stat(filepath.Join(c.dir, "PG_VERSION")); statErr == nil {
		return nil, fmt.Errorf("%w: %s is a data directory; pass its parent (pglocal keeps data in Dir/data)", ErrInvalidOption, c.dir)
	}
	if sock := filepath.Join(c.sockDir, ".s.PGSQL."+strconv.Itoa(c.port)); len(sock) > maxSocketPath {
		return nil, fmt.Errorf("%w: socket path %s is longer than %d bytes; use a shorter Dir", ErrInvalidOption, sock, maxSocketPath)
	}
	if err = os.Mkdir(c.sockDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("pglocal: create socket dir: %w", err)
	}
	for _, p := range []string{c.dir, c.sockDir} {
		if err = acct.chown(p); err != nil {
			return nil, fmt.Errorf("pglocal: hand %s to %s: %w", p, acct, err)
		}
	}
	if err = acct.checkReachable(c.dir); err != nil {
		return nil, err
	}

	initialised, err := hasCluster(c.dataDir)
	if err != nil {
		return nil, err
	}
	if !initialised {
		if err = c.initdb(ctx, bin, acct, opts.Durable); err != nil {
			return nil, err
		}
	} else {
		logf("pglocal: reusing cluster in %s", c.dataDir)
		if _, statErr := os.Stat(filepath.Join(c.dataDir, "postmaster.pid")); statErr == nil {
			// Not shut down cleanly: let a crashed server's processes exit.
			if err = waitForOldServer(c.dataDir, 10*time.Second, logf); err != nil {
				return nil, err
			}
		}
		for _, f := range []string{
			filepath.Join(c.dataDir, "postmaster.pid"),
			filepath.Join(c.sockDir, ".s.PGSQL."+strconv.Itoa(c.port)+".lock"),
		} {
			if err = clearStaleLock(f, c.dataDir, logf); err != nil {
				return nil, err
			}
		}
	}
	if err = c.start(ctx, bin, acct, opts); err != nil {
		return nil, err
	}
	return c, nil
}

// hasCluster reports whether dataDir holds an initialised cluster, and
// refuses a non-empty directory that does not.
func hasCluster(dataDir string) (bool, error) {
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); err == nil {
		return true, nil
	}
	entries, err := os.ReadDir(dataDir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pglocal: read data dir: %w", err)
	}
	if len(entries) > 0 {
		return false, fmt.Errorf("pglocal: %s is not empty but holds no cluster (no PG_VERSION); remove it or choose another Dir", dataDir)
	}
	return false, nil
}

func (c *Cluster) initdb(ctx context.Context, bin string, acct account, durable bool) error {
	began := time.Now()
	logPath := filepath.Join(c.dir, "initdb.log")
	out, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("pglocal: create initdb log: %w", err)
	}
	defer out.Close()
	args := []string{
		"-D", c.dataDir,
		"-A", "trust", // local socket only (listen_addresses=''), mode 0700
		"-U", superuser,
		"-E", "UTF8",
		"--locale=C",
	}
	if !durable {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), args...)
	cmd.Dir = c.dir
	cmd.Env = childEnv(acct)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = acct.sysProcAttr(false)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pglocal: initdb (as %s) failed: %w\n%s", acct, err, tail(logPath))
	}
	c.logf("pglocal: initdb %s in %s", c.dataDir, time.Since(began).Round(time.Millisecond))
	return nil
}

func (c *Cluster) start(ctx context.Context, bin string, acct account, opts Options) error {
	began := time.Now()
	// Keep the previous run's log next to the new one.
	if err := os.Rename(c.logPath, c.logPath+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pglocal: rotate log: %w", err)
	}
	f, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pglocal: open log: %w", err)
	}
	c.logFile = f

	args := []string{"-D", c.dataDir}
	for _, kv := range serverSettings(c.sockDir, c.port, opts) {
		args = append(args, "-c", kv)
	}
	// Not CommandContext: the server must outlive ctx.
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.Dir = c.dir
	cmd.Env = childEnv(acct)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = acct.sysProcAttr(true)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pglocal: start postgres: %w", err)
	}
	c.cmd = cmd
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()

	if err := c.waitReady(ctx); err != nil {
		return fmt.Errorf("pglocal: %w\nserver log %s:\n%s", err, c.logPath, tail(c.logPath))
	}
	c.logf("pglocal: postgres (pid %d, as %s) ready in %s, listening only on unix socket %s/.s.PGSQL.%d; log %s",
		cmd.Process.Pid, acct, time.Since(began).Round(time.Millisecond), c.sockDir, c.port, c.logPath)
	return nil
}

// serverSettings returns the name=value settings passed with -c, sorted by
// name. ExtraSettings override pglocal's defaults (validate forbids the
// listener settings).
func serverSettings(sockDir string, port int, opts Options) []string {
	s := map[string]string{
		"listen_addresses":        "", // no TCP at all
		"port":                    strconv.Itoa(port),
		"unix_socket_directories": sockDir,
		"unix_socket_permissions": "0700", // trust auth: only our OS user (and root) may connect
		"max_connections":         strconv.Itoa(DefaultMaxConnections),
		"logging_collector":       "off", // stderr goes to our log file
		"log_destination":         "stderr",
	}
	if !opts.Durable {
		s["fsync"] = "off"
		s["synchronous_commit"] = "off"
		s["full_page_writes"] = "off"
	}
	maps.Copy(s, opts.ExtraSettings)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(s)) {
		out = append(out, k+"="+s[k])
	}
	return out
}

// waitReady polls until the server accepts a connection, the server exits,
// or ctx ends.
func (c *Cluster) waitReady(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgconn.Connect(cctx, c.ConnString("postgres"))
		cancel()
		if err == nil {
			return conn.Close(ctx)
		}
		last = err
		select {
		case <-c.exited:
			return fmt.Errorf("postgres exited during startup: %v", c.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("postgres not accepting connections: %w (last attempt: %v)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// ConnString returns a keyword/value connection string (as pgx and libpq
// accept) for dbname as the superuser "postgres", through the unix socket,
// for example "host=/tmp/pglocal-123/sock port=5433 user=postgres dbname=app".
// No password is needed (trust authentication).
func (c *Cluster) ConnString(dbname string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s",
		quoteValue(c.sockDir), c.port, quoteValue(superuser), quoteValue(dbname))
}

// quoteValue quotes a keyword/value connection string value when needed.
func quoteValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n\r\v\f'\\") {
		return v
	}
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	return "'" + r.Replace(v) + "'"
}

// SocketDir is the directory holding the server's unix socket, usable as
// the host of a connection string (or psql -h).
func (c *Cluster) SocketDir() string { return c.sockDir }

// Dir is the cluster directory.
func (c *Cluster) Dir() string { return c.dir }

// Stop shuts the server down (fast shutdown: SIGINT, then SIGQUIT and
// SIGKILL if it does not exit in time), waits for it, releases the cluster
// directory and removes it if Start created it. It is idempotent; later
// calls return the first call's result. It returns an error if the server
// had exited before Stop or exits abnormally (crashed, killed).
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Cluster) stop() error {
	began := time.Now()
	var errs []error
	select {
	case <-c.exited:
		errs = append(errs, fmt.Errorf("pglocal: postgres had exited before Stop: %v\nserver log %s:\n%s",
			c.waitErr, c.logPath, tail(c.logPath)))
	default:
		if err := c.shutdown(); err != nil {
			errs = append(errs, err)
		}
		if c.waitErr != nil { // fast shutdown exits 0
			errs = append(errs, fmt.Errorf("pglocal: postgres exited abnormally: %v\nserver log %s:\n%s",
				c.waitErr, c.logPath, tail(c.logPath)))
		}
	}
	c.logf("pglocal: stopped %s in %s", c.sockDir, time.Since(began).Round(time.Millisecond))
	errs = append(errs, c.release())
	return errors.Join(errs...)
}

// shutdown escalates fast → immediate → kill until the server has exited.
func (c *Cluster) shutdown() error {
	steps := []struct {
		name string
		send func(*os.Process) error
	}{
		{"fast shutdown (SIGINT)", interrupt},
		{"immediate shutdown (SIGQUIT)", quit},
		{"SIGKILL", (*os.Process).Kill},
	}
	var errs []error
	for _, s := range steps {
		if err := s.send(c.cmd.Process); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("pglocal: %s: %w", s.name, err))
		}
		select {
		case <-c.exited:
			return errors.Join(errs...)
		case <-time.After(stopTimeout):
			errs = append(errs, fmt.Errorf("pglocal: postgres ignored %s for %s", s.name, stopTimeout))
		}
	}
	<-c.exited
	return errors.Join(errs...)
}

// release closes the log, drops the directory lock and removes a temp dir.
func (c *Cluster) release() error {
	var errs []error
	if c.logFile != nil {
		errs = append(errs, c.logFile.Close())
	}
	if c.unlock != nil {
		errs = append(errs, c.unlock())
	}
	if c.removeDir {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("pglocal: remove %s: %w", c.dir, err))
		}
	}
	return errors.Join(errs...)
}

// abort undoes a failed Start.
func (c *Cluster) abort() {
	if c.cmd != nil {
		select {
		case <-c.exited:
		default:
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
	_ = c.release()
}

// tail returns up to the last 4 KiB of the file at path, for error messages.
func tail(path string) string {
	const limit = 4 << 10
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	start := max(0, st.Size()-limit)
	b, err := io.ReadAll(io.NewSectionReader(f, start, st.Size()-start))
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	if len(b) == 0 {
		return "(empty)"
	}
	return strings.TrimRight(string(b), "\n")
}

// childEnv is the environment for initdb and postgres: ours without PG*
// variables (PGDATA, PGPORT, … must not redirect them), and with the
// identity of the account they run as.
func childEnv(acct account) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "PG") {
			continue
		}
		if acct.switchUser && (name == "HOME" || name == "USER" || name == "LOGNAME") {
			continue
		}
		env = append(env, kv)
	}
	if acct.switchUser {
		env = append(env, "HOME="+acct.home, "USER="+acct.name, "LOGNAME="+acct.name)
	}
	return env
}
