package testdb_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/schema"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func connect(t *testing.T, connString string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), connString)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func tableExists(t *testing.T, conn *pgx.Conn, name string) bool {
	t.Helper()
	var reg *string
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT to_regclass($1)::text", name).Scan(&reg))
	return reg != nil
}

func currentDatabase(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var db string
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&db))
	return db
}

func TestNewIsMigrated(t *testing.T) {
	t.Parallel()
	conn := connect(t, testdb.New(t))

	for _, table := range []string{"operations", "inbox", "outbox"} {
		require.True(t, tableExists(t, conn, table), "migrated table %s is missing", table)
	}
	want, err := schema.Migrations()
	require.NoError(t, err)
	var applied int
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*) FROM schema_migrations").Scan(&applied))
	require.Equal(t, len(want), applied)
}

// TestParallelTestsAreIsolated runs two parallel tests that hold their
// databases at the same time: each creates a table, waits for the other to
// have created its own, and checks the other's table is absent from its own
// database.
func TestParallelTestsAreIsolated(t *testing.T) {
	var (
		created sync.WaitGroup
		mu      sync.Mutex
		names   = map[string]string{}
	)
	created.Add(2)
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conn := connect(t, testdb.New(t))
			_, err := conn.Exec(t.Context(), "CREATE TABLE only_in_"+name+" (id int)")
			require.NoError(t, err)
			mu.Lock()
			names[name] = currentDatabase(t, conn)
			mu.Unlock()

			created.Done()
			waitOrFail(t, &created, 30*time.Second, "the other parallel test never created its table (needs -parallel >= 2)")

			other := map[string]string{"a": "b", "b": "a"}[name]
			require.False(t, tableExists(t, conn, "only_in_"+other), "table of parallel test %s visible in test %s's database", other, name)
			require.True(t, tableExists(t, conn, "only_in_"+name))
		})
	}
	t.Cleanup(func() {
		if len(names) == 2 {
			require.NotEqual(t, names["a"], names["b"], "parallel tests share a database")
		}
	})
}

func waitOrFail(t *testing.T, wg *sync.WaitGroup, d time.Duration, msg string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatal(msg)
	}
}

func TestDatabaseIsDroppedAfterTest(t *testing.T) {
	t.Parallel()
	var (
		name string
		open *pgx.Conn
	)
	t.Run("user", func(t *testing.T) {
		var err error
		// Left open past the test: DROP … WITH (FORCE) must not wait for it.
		open, err = pgx.Connect(t.Context(), testdb.New(t))
		require.NoError(t, err)
		name = currentDatabase(t, open)
	})
	if open != nil {
		defer open.Close(context.Background()) //nolint:errcheck // already terminated by the drop
	}
	if name == "" {
		t.Skip("the subtest got no database (its failure or skip says why)")
	}
	// A second database on the same server shows whether the first is gone.
	conn := connect(t, testdb.New(t))
	var exists bool
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	require.False(t, exists, "database %s still exists after its test ended", name)
}

func TestNewPool(t *testing.T) {
	t.Parallel()
	pool := testdb.NewPool(t)
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM operations").Scan(&n))
	require.Zero(t, n, "a fresh database has no rows")
}

// TestUnavailablePostgres runs this test binary against a DATABASE_URL
// nothing listens on: TestNewIsMigrated must fail under CI=true and skip
// otherwise, saying why and how to fix it.
func TestUnavailablePostgres(t *testing.T) {
	t.Parallel()
	run := func(ci string) (string, error) {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestNewIsMigrated$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(),
			"DATABASE_URL=postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5",
			"CI="+ci,
		)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := run("true")
	require.Error(t, err, "CI=true with Postgres unavailable must fail:\n%s", out)
	require.Contains(t, out, "--- FAIL: TestNewIsMigrated")
	require.Contains(t, out, "PostgreSQL is unavailable")
	require.Contains(t, out, "CI=true")

	out, err = run("")
	require.NoError(t, err, "outside CI an unavailable Postgres skips:\n%s", out)
	require.Contains(t, out, "--- SKIP: TestNewIsMigrated")
	require.Contains(t, out, "Fix: point DATABASE_URL at a reachable")
	require.False(t, strings.Contains(out, "--- PASS: TestNewIsMigrated"))
}

// BenchmarkNew measures creating one test database from the template (the
// drops run in cleanup, untimed).
func BenchmarkNew(b *testing.B) {
	testdb.New(b) // server and template setup, before the timed loop
	for b.Loop() {
		testdb.New(b)
	}
}
