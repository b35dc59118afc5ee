package app_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/testdb"
)

// TestEnsureDBUser makes the reconciler process's login user, twice (the
// second run changes nothing), after someone granted it a role it must not
// have: it ends a member of exactly the reconciler's, the maintainer's and
// the relay's roles. A user left in opledger_operator, or a second run
// failing because the user exists, fails here.
func TestEnsureDBUser(t *testing.T) {
	t.Parallel()
	cs := testdb.New(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, cs)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.WithoutCancel(ctx)) }) // after the DROP ROLE below
	user := fmt.Sprintf("opledger_svc_test_%d", testdbSeq(t, conn))
	t.Cleanup(func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "DROP ROLE IF EXISTS "+pgx.Identifier{user}.Sanitize())
	})

	require.NoError(t, app.EnsureDBUser(ctx, conn, user, app.Reconciler, "first"))
	_, err = conn.Exec(ctx, "GRANT opledger_operator TO "+pgx.Identifier{user}.Sanitize())
	require.NoError(t, err)
	require.NoError(t, app.EnsureDBUser(ctx, conn, user, app.Reconciler, "second"))

	var roles []string
	var login, super bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT array_agg(g.rolname::text), bool_and(u.rolcanlogin), bool_and(u.rolsuper)
		FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid JOIN pg_roles u ON u.oid = m.member
		WHERE u.rolname = $1`, user).Scan(&roles, &login, &super))
	sort.Strings(roles)
	want := app.ProcessDBRoles(app.Reconciler)
	sort.Strings(want)
	require.Equal(t, want, roles)
	require.True(t, login)
	require.False(t, super)

	require.Error(t, app.EnsureDBUser(ctx, conn, user, "no-such-service", "x"))
	require.Error(t, app.EnsureDBUser(ctx, conn, user, app.Reconciler, ""))
}

// testdbSeq is a number unique on the server, for role names (roles are
// the server's, shared by every test database).
func testdbSeq(t *testing.T, conn *pgx.Conn) int64 {
	var n int64
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT pg_backend_pid()::bigint * 1000 + (random() * 999)::bigint`).Scan(&n))
	return n
}

// planner-ingest's login and the operators' API's are two users:
// intake's can neither read nor write attempts (nor read the audit log),
// the API's reads them and writes neither. Breaking it: planner-ingest's
// login in opledger_operator again (as it was while it served the API on
// one login), which reads attempts.
func TestPlannerIngestLoginIsNotTheAPIs(t *testing.T) {
	t.Parallel()
	cs := testdb.New(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, cs)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.WithoutCancel(ctx)) })
	require.NotContains(t, app.ProcessDBRoles(app.PlannerIngest), app.DBRoles[app.PartAPI])
	require.Equal(t, []string{"opledger_operator"}, app.LoginDBRoles(app.PartAPI))
	require.Contains(t, app.DBLogins, app.PartAPI)
	require.Equal(t, "opledger_svc_api", app.DBUserName(app.PartAPI))

	n := testdbSeq(t, conn)
	users := map[string]string{}
	for _, login := range []string{app.PlannerIngest, app.PartAPI} {
		user := fmt.Sprintf("opledger_svc_test_%s_%d", strings.ReplaceAll(login, "-", "_"), n)
		t.Cleanup(func() {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "DROP ROLE IF EXISTS "+pgx.Identifier{user}.Sanitize())
		})
		require.NoError(t, app.EnsureDBUser(ctx, conn, user, login, "pw-"+login))
		users[login] = user
	}
	// try runs sql as login, in a transaction rolled back after it.
	try := func(login, sql string) error {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		_, err = tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{users[login]}.Sanitize())
		require.NoError(t, err)
		_, err = tx.Exec(ctx, sql)
		return err
	}
	for _, sql := range []string{`SELECT * FROM attempts`, `UPDATE attempts SET outcome = 'success'`, `SELECT * FROM audit_log`} {
		require.ErrorContains(t, try(app.PlannerIngest, sql), "permission denied", sql)
	}
	require.NoError(t, try(app.PlannerIngest, `SELECT count(*) FROM operations`))
	require.NoError(t, try(app.PartAPI, `SELECT * FROM attempts`))
	require.ErrorContains(t, try(app.PartAPI, `UPDATE attempts SET outcome = 'success'`), "permission denied")
}
