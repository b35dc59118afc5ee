package testdb

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// User creates a login user that is a member of roles (opledger's group
// roles, schema.Roles, created by the migrations) and returns connString
// (from New) logged in as that user, with a random password. Roles belong to
// the whole server, not to one database: the user is unique to this test
// binary and dropped when the binary ends (Main).
//
// The server's role needs CREATEROLE (and, from PostgreSQL 16, ADMIN on the
// group roles, which the role that ran the migrations has); t fails saying
// so when it lacks it.
func User(t testing.TB, connString string, roles ...string) string {
	t.Helper()
	if h.admin == nil {
		t.Fatal("testdb: User needs a database from New first")
	}
	name := fmt.Sprintf("%s_u%d", h.prefix, h.seq.Add(1))
	password := randomHex(16)
	ctx := t.Context()
	// INHERIT, so that the user has its roles' privileges without SET ROLE,
	// as a service's login user does.
	sql := "CREATE ROLE " + ident(name) + " LOGIN INHERIT PASSWORD " + literal(password)
	if len(roles) > 0 {
		quoted := make([]string, len(roles))
		for i, r := range roles {
			quoted[i] = ident(r)
		}
		sql += " IN ROLE " + strings.Join(quoted, ", ")
	}
	if _, err := h.admin.Exec(ctx, sql); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
			t.Fatalf("testdb: create login user in %v: %v\nTests that run services as their Postgres roles create login users: "+
				"the role of DATABASE_URL needs CREATEROLE (ALTER ROLE <it> CREATEROLE) or to be a superuser, "+
				"and from PostgreSQL 16 ADMIN on the opledger_* roles (the role that ran the migrations has it)", roles, err)
		}
		t.Fatalf("testdb: create login user in %v: %v", roles, err)
	}
	h.usersMu.Lock()
	h.users = append(h.users, name)
	h.usersMu.Unlock()
	cs, err := withUser(connString, name, password)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	return cs
}

// dropUsers drops the login users User created (teardown).
func (h *harness) dropUsers(ctx context.Context) error {
	h.usersMu.Lock()
	defer h.usersMu.Unlock()
	var errs []error
	for _, u := range h.users {
		if _, err := h.admin.Exec(ctx, "DROP ROLE IF EXISTS "+ident(u)); err != nil {
			errs = append(errs, fmt.Errorf("drop login user %s: %w", u, err))
		}
	}
	h.users = nil
	return errors.Join(errs...)
}

// withUser returns connString (a URL or keyword/value string) logging in as
// user with password.
func withUser(connString, user, password string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("connection string: %w", err)
		}
		u.User = url.UserPassword(user, password)
		q := u.Query()
		q.Del("user")
		q.Del("password")
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// In keyword/value strings the last occurrence of a keyword wins.
	return connString + " user=" + user + " password=" + password, nil
}

func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
