package app

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/opledger/opledger/schema"
)

// DBUserName is the login user of a service's process (or of the API,
// PartAPI) that `opledger db-users` creates: opledger_svc_<service>.
func DBUserName(service string) string {
	return "opledger_svc_" + strings.ReplaceAll(service, "-", "_")
}

// EnsureDBUser makes user a login user with password that is a member of
// exactly the roles of service's process, or the API's (LoginDBRoles): it creates the
// user when absent, sets its password, grants the missing roles and revokes
// any other opledger role. It is idempotent. conn must be the migrator (or
// a role with CREATEROLE and, from PostgreSQL 16, ADMIN on the roles). The
// password is sent as a quoted literal and never logged.
func EnsureDBUser(ctx context.Context, conn *pgx.Conn, user, service, password string) error {
	want := LoginDBRoles(service)
	if want == nil {
		return fmt.Errorf("db user %s: unknown service %q (have %v)", user, service, DBLogins)
	}
	if password == "" {
		return fmt.Errorf("db user %s: empty password", user)
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, user).Scan(&exists); err != nil {
			return fmt.Errorf("db user %s: %w", user, err)
		}
		verb := "ALTER"
		if !exists {
			verb = "CREATE"
		}
		var stmt string
		if err := tx.QueryRow(ctx, `SELECT format('`+verb+` ROLE %I LOGIN INHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD %L', $1::text, $2::text)`,
			user, password).Scan(&stmt); err != nil {
			return fmt.Errorf("db user %s: %w", user, err)
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("db user %s: %s role: %w", user, strings.ToLower(verb), err)
		}
		rows, err := tx.Query(ctx, `SELECT g.rolname::text FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
			JOIN pg_roles u ON u.oid = m.member WHERE u.rolname = $1`, user)
		if err != nil {
			return fmt.Errorf("db user %s: memberships: %w", user, err)
		}
		have, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("db user %s: memberships: %w", user, err)
		}
		for _, r := range schema.Roles {
			q := pgx.Identifier{r}.Sanitize() + " TO " + pgx.Identifier{user}.Sanitize()
			switch in, should := slices.Contains(have, r), slices.Contains(want, r); {
			case should && !in:
				_, err = tx.Exec(ctx, "GRANT "+q)
			case in && !should:
				_, err = tx.Exec(ctx, "REVOKE "+pgx.Identifier{r}.Sanitize()+" FROM "+pgx.Identifier{user}.Sanitize())
			}
			if err != nil {
				return fmt.Errorf("db user %s: role %s: %w", user, r, err)
			}
		}
		return nil
	})
}
