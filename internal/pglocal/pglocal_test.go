//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package pglocal

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// startCluster starts a cluster or skips (fails under CI=true) when the
// PostgreSQL binaries are missing. It stops the cluster in cleanup.
func startCluster(t *testing.T, opts Options) *Cluster {
	t.Helper()
	if _, err := BinDir(); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("CI=true and %v", err)
		}
		t.Skipf("%v", err)
	}
	opts.Logf = t.Logf
	began := time.Now()
	c, err := Start(t.Context(), opts)
	require.NoError(t, err)
	t.Logf("Start took %s", time.Since(began))
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

func connect(t *testing.T, c *Cluster) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), c.ConnString("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func show(t *testing.T, conn *pgx.Conn, setting string) string {
	t.Helper()
	var v string
	require.NoError(t, conn.QueryRow(t.Context(), "SHOW "+setting).Scan(&v))
	return v
}

// reachableTempDir is a temp dir the server's OS user can enter (t.TempDir
// is root-only when tests run as root), removed in cleanup.
func reachableTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "pglocaltest-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(d, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	c := startCluster(t, Options{})
	conn := connect(t, c)

	var one int
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT 1").Scan(&one))
	require.Equal(t, 1, one)

	require.Equal(t, "", show(t, conn, "listen_addresses"), "no TCP listener")
	require.Equal(t, "off", show(t, conn, "fsync"))
	require.Equal(t, "off", show(t, conn, "synchronous_commit"))
	require.Equal(t, "off", show(t, conn, "full_page_writes"))
	require.Equal(t, strconv.Itoa(DefaultMaxConnections), show(t, conn, "max_connections"))
	require.Equal(t, "UTF8", show(t, conn, "server_encoding"))
	require.Equal(t, superuser, show(t, conn, "session_authorization"))

	require.Equal(t, filepath.Join(c.Dir(), "sock"), c.SocketDir())
	wantParent := os.TempDir()
	if _, set := os.LookupEnv("TMPDIR"); !set && memTempDir() != "" {
		wantParent = memTempDir()
	}
	require.Equal(t, wantParent, filepath.Dir(c.Dir()), "temp cluster dir location")
	require.FileExists(t, filepath.Join(c.SocketDir(), ".s.PGSQL."+strconv.Itoa(DefaultPort)))
	require.FileExists(t, filepath.Join(c.Dir(), "postgres.log"))
	if os.Geteuid() == 0 {
		acct, err := serverAccount()
		require.NoError(t, err)
		st, err := os.Stat(filepath.Join(c.Dir(), "data"))
		require.NoError(t, err)
		require.Equal(t, acct.uid, st.Sys().(*syscall.Stat_t).Uid, "data dir owned by the server user")
		require.NotZero(t, acct.uid)
	}

	require.NoError(t, conn.Close(t.Context()))
	require.NoError(t, c.Stop())
	require.NoDirExists(t, c.Dir(), "Stop removes the temp dir it created")
	require.NoError(t, c.Stop(), "Stop is idempotent")
}

func TestStartConcurrentClustersAreIndependent(t *testing.T) {
	t.Parallel()
	clusters := make([]*Cluster, 2)
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Go(func() { clusters[i] = startCluster(t, Options{}) })
	}
	wg.Wait()
	if t.Failed() || t.Skipped() {
		return
	}
	a, b := clusters[0], clusters[1]
	require.NotEqual(t, a.SocketDir(), b.SocketDir())

	connA, connB := connect(t, a), connect(t, b)
	_, err := connA.Exec(t.Context(), "CREATE TABLE only_in_a (id int)")
	require.NoError(t, err)
	var reg *string
	require.NoError(t, connB.QueryRow(t.Context(), "SELECT to_regclass('only_in_a')::text").Scan(&reg))
	require.Nil(t, reg, "table created in cluster A is visible in cluster B")
}

func TestDirIsReusedAndKeepsData(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(reachableTempDir(t), "cluster")

	c := startCluster(t, Options{Dir: dir, Port: 5999, Durable: true})
	conn := connect(t, c)
	require.Equal(t, "on", show(t, conn, "fsync"), "Durable keeps fsync")
	_, err := conn.Exec(t.Context(), "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('hello')")
	require.NoError(t, err)
	require.NoError(t, conn.Close(t.Context()))

	_, err = Start(t.Context(), Options{Dir: dir})
	require.ErrorIs(t, err, ErrDirInUse, "a second Start on a Dir in use")

	require.NoError(t, c.Stop())
	require.DirExists(t, filepath.Join(dir, "data"), "Stop keeps a Dir it did not create")

	c = startCluster(t, Options{Dir: dir, Port: 5999, Durable: true})
	var v string
	require.NoError(t, connect(t, c).QueryRow(t.Context(), "SELECT v FROM kept").Scan(&v))
	require.Equal(t, "hello", v)
}

// TestRestartAfterCrash kills the whole server process group with SIGKILL
// (as an OOM kill or power loss would), leaving postmaster.pid behind, and
// restarts on the same Dir.
func TestRestartAfterCrash(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(reachableTempDir(t), "cluster")
	c := startCluster(t, Options{Dir: dir, Durable: true})
	_, err := connect(t, c).Exec(t.Context(), "CREATE TABLE survived (id int); INSERT INTO survived VALUES (1)")
	require.NoError(t, err)

	pid, ok := lockFilePID(filepath.Join(dir, "data", "postmaster.pid"))
	require.True(t, ok)
	require.NoError(t, syscall.Kill(-pid, syscall.SIGKILL)) // the group: postmaster and backends
	<-c.exited
	require.Error(t, c.Stop(), "Stop reports a server that died before it")
	require.FileExists(t, filepath.Join(dir, "data", "postmaster.pid"), "stale pid file left by the crash")

	c = startCluster(t, Options{Dir: dir, Durable: true})
	var n int
	require.NoError(t, connect(t, c).QueryRow(t.Context(), "SELECT count(*) FROM survived").Scan(&n))
	require.Equal(t, 1, n)
}

// TestStalePidOfUnrelatedProcess leaves a postmaster.pid naming a live
// process of the server's user that is not a postgres server (PID reuse
// after a container restart), which postgres alone would refuse.
func TestStalePidOfUnrelatedProcess(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/cwd"); err != nil {
		t.Skip("needs /proc to tell a live postmaster from an unrelated process")
	}
	dir := filepath.Join(reachableTempDir(t), "cluster")
	c := startCluster(t, Options{Dir: dir})
	require.NoError(t, c.Stop())

	acct, err := serverAccount()
	require.NoError(t, err)
	sleeper := exec.Command("sleep", "60")
	sleeper.SysProcAttr = acct.sysProcAttr(false)
	require.NoError(t, sleeper.Start())
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })

	pidFile := filepath.Join(dir, "data", "postmaster.pid")
	require.NoError(t, os.WriteFile(pidFile, []byte(strconv.Itoa(sleeper.Process.Pid)+"\n"+filepath.Join(dir, "data")+"\n"), 0o600))
	require.NoError(t, acct.chown(pidFile))

	c = startCluster(t, Options{Dir: dir})
	connect(t, c)
}

func TestStartFailureReportsServerLog(t *testing.T) {
	t.Parallel()
	if _, err := BinDir(); err != nil {
		t.Skipf("%v", err)
	}
	_, err := Start(t.Context(), Options{ExtraSettings: map[string]string{"shared_buffers": "lots"}})
	require.Error(t, err)
	require.Contains(t, err.Error(), `invalid value for parameter "shared_buffers"`, "error carries the server log's tail")
}

func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string]Options{
		"negative port":    {Port: -1},
		"port too large":   {Port: 70000},
		"tcp listener":     {ExtraSettings: map[string]string{"listen_addresses": "*"}},
		"port setting":     {ExtraSettings: map[string]string{"port": "5432"}},
		"socket dirs":      {ExtraSettings: map[string]string{"unix_socket_directories": "/tmp"}},
		"bad setting name": {ExtraSettings: map[string]string{"max connections": "1"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Start(t.Context(), opts)
			require.ErrorIs(t, err, ErrInvalidOption)
		})
	}
	t.Run("parent the server user cannot enter", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("only root switches to the postgres user")
		}
		_, err := Start(t.Context(), Options{Dir: filepath.Join(t.TempDir(), "cluster")}) // t.TempDir is 0700 root
		if errors.Is(err, ErrBinariesNotFound) {
			t.Skip(err)
		}
		require.ErrorContains(t, err, "cannot enter")
	})
	t.Run("data dir as Dir", func(t *testing.T) {
		dir := reachableTempDir(t)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "PG_VERSION"), []byte("15\n"), 0o600))
		_, err := Start(t.Context(), Options{Dir: dir})
		if errors.Is(err, ErrBinariesNotFound) {
			t.Skip(err)
		}
		require.ErrorIs(t, err, ErrInvalidOption)
	})
}

func TestConnStringQuotesValues(t *testing.T) {
	t.Parallel()
	c := &Cluster{sockDir: `/tmp/a dir/it's\here`, port: 6000}
	cfg, err := pgconn.ParseConfig(c.ConnString("my db"))
	require.NoError(t, err)
	require.Equal(t, `/tmp/a dir/it's\here`, cfg.Host)
	require.Equal(t, uint16(6000), cfg.Port)
	require.Equal(t, "my db", cfg.Database)
	require.Equal(t, superuser, cfg.User)
	require.Nil(t, cfg.TLSConfig, "no TLS over a unix socket")
}

func TestBinDirHonoursPGBinDir(t *testing.T) {
	found, foundErr := BinDir()

	empty := t.TempDir()
	t.Setenv("PG_BINDIR", empty)
	_, err := BinDir()
	require.ErrorIs(t, err, ErrBinariesNotFound, "a wrong PG_BINDIR is an error, not a fallback")
	require.Contains(t, err.Error(), "PG_BINDIR="+empty)

	if foundErr == nil {
		t.Setenv("PG_BINDIR", found)
		got, err := BinDir()
		require.NoError(t, err)
		require.Equal(t, found, got)
	}
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	dirs := []string{"/usr/lib/postgresql/9.6/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin"}
	newest := dirs[0]
	for _, d := range dirs[1:] {
		if compareVersions(d, newest) > 0 {
			newest = d
		}
	}
	require.Equal(t, "/usr/lib/postgresql/16/bin", newest)
	require.Negative(t, compareVersions("/usr/lib/postgresql/9.6/bin", "/usr/lib/postgresql/10/bin"))
}

func TestSweepRemovesOnlyAbandonedDirs(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	old := time.Now().Add(-2 * sweepMinAge)
	mk := func(name string, lock bool) string {
		d := filepath.Join(tmp, name)
		require.NoError(t, os.Mkdir(d, 0o700))
		if lock {
			require.NoError(t, os.WriteFile(filepath.Join(d, lockName), nil, 0o600))
		}
		require.NoError(t, os.Chtimes(d, old, old))
		return d
	}
	abandoned := mk(tempPrefix+"abandoned", true)
	held := mk(tempPrefix+"held", true)
	unlock, err := lockDir(filepath.Join(held, lockName))
	require.NoError(t, err)
	defer unlock()
	noLock := mk(tempPrefix+"nolock", false)
	other := mk("something-else", true)
	fresh := filepath.Join(tmp, tempPrefix+"fresh")
	require.NoError(t, os.Mkdir(fresh, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(fresh, lockName), nil, 0o600))
	running := mk(tempPrefix+"running", true)
	require.NoError(t, os.MkdirAll(filepath.Join(running, "data"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(running, "data", "postmaster.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600))
	require.NoError(t, os.Chtimes(running, old, old))

	sweepStale(tmp, t.Logf)

	require.NoDirExists(t, abandoned)
	for _, d := range []string{held, noLock, other, fresh, running} {
		require.DirExists(t, d)
	}
}

func TestChildEnvDropsPGVariables(t *testing.T) {
	t.Setenv("PGDATA", "/elsewhere")
	t.Setenv("PGPORT", "1")
	env := strings.Join(childEnv(account{name: "x"}), "\n")
	require.NotContains(t, env, "PGDATA=")
	require.NotContains(t, env, "PGPORT=")
}
