package app_test

import (
	"context"
	"fmt"
	"sort"
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
