package schema_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/schema"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var update = flag.Bool("update", false, "rewrite the grant matrix in docs/security.md")

func connect(t *testing.T, cs string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), cs)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.WithoutCancel(t.Context())) })
	return conn
}

// execCode runs sql in a transaction that is rolled back, and returns the
// SQLSTATE it failed with ("" when it succeeded).
func execCode(t *testing.T, conn *pgx.Conn, sql string) string {
	t.Helper()
	tx, err := conn.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck // always rolled back
	if _, err = tx.Exec(t.Context(), sql); err == nil {
		return ""
	}
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "%s: %v", sql, err)
	return pgErr.Code
}

// forbiddenToAll are things no service role may do: only the migrator,
// which owns the tables, changes the schema.
var forbiddenToAll = []string{
	`ALTER TABLE operations ADD COLUMN sneaky int`,
	`ALTER TABLE attempts DROP CONSTRAINT attempts_pkey`,
	`DROP TABLE outbox`,
	`TRUNCATE operations CASCADE`,
	`CREATE TABLE public.sneaky (x int)`,
	`DROP TRIGGER operation_events_no_update ON operation_events`,
	`DELETE FROM operation_events`,
	`DELETE FROM operations`,
	`UPDATE operations SET tool = 'other'`,
	`UPDATE operations SET args_canonical = '{}'`,
	`UPDATE operations SET idempotency_key = 'other'`,
	`UPDATE operations SET tenant = 'other'`,
	`DELETE FROM schema_migrations`,
	`INSERT INTO schema_migrations (name) VALUES ('9999_sneaky.sql')`,
	`CREATE INDEX sneaky_idx ON operations (tool)`,
	`ALTER TABLE operation_events DISABLE TRIGGER operation_events_no_update`,
	`UPDATE audit_log SET outcome = 'ok'`,
	`DELETE FROM audit_log`,
}

// forbidden are each role's own refusals: the writes (and reads) that are
// another part's job.
var forbidden = map[string][]string{
	"opledger_ingest": {
		`DELETE FROM webhook_evidence`,
		`UPDATE webhook_evidence SET match_value = 'other'`,
		`UPDATE webhook_evidence SET outcome = 'success'`,
		`UPDATE attempts SET outcome = 'success'`,
		`INSERT INTO attempts (id, operation_id, number, lease_epoch, deadline_at) VALUES ('a', 'o', 1, 1, now())`,
		`SELECT * FROM attempts`,
		`UPDATE operations SET attempt_count = 9`,
		`UPDATE outbox SET sent_at = now()`,
		`DELETE FROM outbox`,
		`DELETE FROM inbox`,
		`UPDATE inbox SET payload = ''`,
		`UPDATE approval_requests SET status = 'approved'`,
		`INSERT INTO approval_votes (operation_id, approver, decision, args_hash, reason) VALUES ('o', 'me', 'approve', 'h', 'r')`,
		`INSERT INTO audit_log (actor, role, action, outcome) VALUES ('a', 'admin', 'x', 'ok')`,
		`INSERT INTO entity_leases (entity_type, entity_id, operation_id, expires_at) VALUES ('t', 'e', 'o', now())`,
		`UPDATE maintenance_leader SET holder = 'me'`,
		`INSERT INTO reconcile_lookups (operation_id, version) VALUES ('o', 1)`,
	},
	"opledger_dispatcher": {
		`SELECT * FROM webhook_evidence`,
		`UPDATE webhook_evidence SET status = 'applied'`,
		`INSERT INTO inbox (source, event_id, payload, payload_hash, decision) VALUES ('s', 'e', '', 'h', 'new')`,
		`SELECT * FROM inbox`,
		`INSERT INTO operations (id, workflow_id, tool, tool_version, args_canonical, args_hash, side_effect_class, idempotency_key, state) VALUES ('o', 'w', 't', 1, '{}', 'h', 'pure_read', 'k', 'planned')`,
		`DELETE FROM attempts`,
		`UPDATE attempts SET operation_id = 'other'`,
		`UPDATE outbox SET sent_at = now()`,
		`SELECT * FROM outbox`,
		`UPDATE approval_requests SET status = 'approved'`,
		`INSERT INTO audit_log (actor, role, action, outcome) VALUES ('a', 'admin', 'x', 'ok')`,
		`UPDATE entity_versions SET seq = 1`,
		`SELECT * FROM reconcile_lookups`,
	},
	"opledger_reconciler": {
		`INSERT INTO webhook_evidence (provider, delivery_id, event_type, tools, match_by, match_value, outcome, hold_until) VALUES ('p', 'd', 't', '{}', 'idempotency_key', 'k', 'success', now())`,
		`UPDATE webhook_evidence SET match_value = 'other'`,
		`INSERT INTO attempts (id, operation_id, number, lease_epoch, deadline_at) VALUES ('a', 'o', 1, 1, now())`,
		`UPDATE attempts SET outcome = 'success'`,
		`UPDATE operations SET attempt_count = 9`,
		`INSERT INTO inbox (source, event_id, payload, payload_hash, decision) VALUES ('s', 'e', '', 'h', 'new')`,
		`DELETE FROM outbox`,
		`UPDATE outbox SET sent_at = now()`,
		`INSERT INTO operations (id, workflow_id, tool, tool_version, args_canonical, args_hash, side_effect_class, idempotency_key, state) VALUES ('o', 'w', 't', 1, '{}', 'h', 'pure_read', 'k', 'planned')`,
		`UPDATE approval_requests SET status = 'approved'`,
	},
	"opledger_compensator": {
		`SELECT * FROM webhook_evidence`,
		`UPDATE attempts SET outcome = 'success'`,
		`SELECT * FROM attempts`,
		`DELETE FROM outbox`,
		`UPDATE outbox SET sent_at = now()`,
		`DELETE FROM inbox`,
		`UPDATE approval_requests SET status = 'approved'`,
		`INSERT INTO audit_log (actor, role, action, outcome) VALUES ('a', 'admin', 'x', 'ok')`,
	},
	"opledger_maintainer": {
		`INSERT INTO webhook_evidence (provider, delivery_id, event_type, tools, match_by, match_value, outcome, hold_until) VALUES ('p', 'd', 't', '{}', 'idempotency_key', 'k', 'success', now())`,
		`DELETE FROM webhook_evidence`,
		`UPDATE webhook_evidence SET external_object_id = 'ch_other'`,
		`INSERT INTO operations (id, workflow_id, tool, tool_version, args_canonical, args_hash, side_effect_class, idempotency_key, state) VALUES ('o', 'w', 't', 1, '{}', 'h', 'pure_read', 'k', 'planned')`,
		`INSERT INTO inbox (source, event_id, payload, payload_hash, decision) VALUES ('s', 'e', '', 'h', 'new')`,
		`INSERT INTO attempts (id, operation_id, number, lease_epoch, deadline_at) VALUES ('a', 'o', 1, 1, now())`,
		`UPDATE outbox SET sent_at = now()`,
		`DELETE FROM outbox`,
		`INSERT INTO approval_votes (operation_id, approver, decision, args_hash, reason) VALUES ('o', 'me', 'approve', 'h', 'r')`,
		`INSERT INTO audit_log (actor, role, action, outcome) VALUES ('a', 'admin', 'x', 'ok')`,
		`UPDATE reconcile_lookups SET failures = 0`,
	},
	"opledger_relay": {
		`SELECT * FROM webhook_evidence`,
		`SELECT * FROM operations`,
		`SELECT * FROM inbox`,
		`INSERT INTO outbox (subject, msg_id, payload) VALUES ('s', 'm', '')`,
		`UPDATE outbox SET sent_at = now()`,
		`UPDATE outbox SET payload = ''`,
		`UPDATE outbox SET subject = 'opledger.ops.dispatch.other'`,
		`INSERT INTO outbox_batches (batch_id, available_at, subjects, msg_ids, headers, payloads, operation_ids) VALUES ('b', now(), '{s}', '{m}', '{"{}"}', '{""}', '{""}')`,
		`UPDATE outbox_batches SET subjects = '{opledger.ops.dispatch.other}'`,
		`UPDATE operations SET state = 'completed_success'`,
	},
	"opledger_operator": {
		`UPDATE webhook_evidence SET status = 'applied'`,
		`INSERT INTO webhook_evidence (provider, delivery_id, event_type, tools, match_by, match_value, outcome, hold_until) VALUES ('p', 'd', 't', '{}', 'idempotency_key', 'k', 'success', now())`,
		`UPDATE attempts SET outcome = 'success'`,
		`INSERT INTO attempts (id, operation_id, number, lease_epoch, deadline_at) VALUES ('a', 'o', 1, 1, now())`,
		`UPDATE inbox SET payload = ''`,
		`DELETE FROM inbox`,
		`DELETE FROM outbox`,
		`UPDATE outbox SET sent_at = now()`,
		`DELETE FROM approval_votes`,
		`UPDATE approval_votes SET decision = 'approve'`,
		`UPDATE maintenance_leader SET holder = 'me'`,
	},
}

// TestRolesAreRefusedWhatIsNotTheirs logs in as a user in each role and
// tries what the role must not do: every statement must fail with
// insufficient_privilege (42501). A grant widened in schema/grants.sql, or a
// role made owner of a table, makes the statement get past the privilege
// check and this test fail naming it. The first statement of each role,
// which it may run, shows the login itself works.
func TestRolesAreRefusedWhatIsNotTheirs(t *testing.T) {
	t.Parallel()
	cs := testdb.New(t)
	require.Len(t, forbidden, len(schema.Roles), "every role has its refusals listed")
	for _, role := range schema.Roles {
		t.Run(role, func(t *testing.T) {
			t.Parallel()
			conn := connect(t, testdb.User(t, cs, role))
			require.Empty(t, execCode(t, conn, `SELECT count(*) FROM schema_migrations`), "%s may read schema_migrations", role)
			for _, sql := range append(append([]string{}, forbiddenToAll...), forbidden[role]...) {
				require.Equal(t, "42501", execCode(t, conn, sql), "%s must be refused: %s", role, sql)
			}
		})
	}
}

// TestGrantsRefuseAnUndecidedTable adds a table without deciding its grants,
// as a migration merged without a block in schema/grants.sql would: the
// migrator must refuse to finish and name the table, and the privileges
// must stay as they were. Once grants.sql decides it (here: a GRANT run by
// hand stands in for its line), the check passes. If the check ignored new
// tables, Migrate would return nil and this test fail.
func TestGrantsRefuseAnUndecidedTable(t *testing.T) {
	t.Parallel()
	conn := connect(t, testdb.New(t))
	ctx := t.Context()
	_, err := conn.Exec(ctx, `CREATE TABLE webhook_sneaky (id text PRIMARY KEY);
		CREATE FUNCTION sneaky_fn() RETURNS int LANGUAGE sql AS 'SELECT 1'`)
	require.NoError(t, err)

	_, err = schema.Migrate(ctx, conn)
	require.ErrorIs(t, err, schema.ErrUndecidedGrants)
	require.Contains(t, err.Error(), "table webhook_sneaky")
	require.Contains(t, err.Error(), "routine sneaky_fn")
	require.Contains(t, err.Error(), "schema/grants.sql")

	var ingestMayRead bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT has_table_privilege('opledger_ingest', 'operations', 'SELECT')`).Scan(&ingestMayRead))
	require.True(t, ingestMayRead, "a refused apply rolls back: the roles keep their privileges")

	_, err = conn.Exec(ctx, `DROP FUNCTION sneaky_fn()`)
	require.NoError(t, err)
	// grants.sql revokes everything before granting, so a hand-made grant
	// would not survive ApplyGrants: decide the table through an owner-only
	// name instead, by dropping it and checking that the schema is clean.
	_, err = conn.Exec(ctx, `DROP TABLE webhook_sneaky`)
	require.NoError(t, err)
	require.NoError(t, schema.ApplyGrants(ctx, conn))
}

// TestGrantsAreIdempotent applies the grants twice over a migrated database:
// the second run must succeed and leave the same privileges (a
// non-idempotent grants.sql, say one creating something, fails here).
func TestGrantsAreIdempotent(t *testing.T) {
	t.Parallel()
	conn := connect(t, testdb.New(t))
	before := matrix(t, conn)
	require.NoError(t, schema.ApplyGrants(t.Context(), conn))
	require.NoError(t, schema.ApplyGrants(t.Context(), conn))
	require.Equal(t, before, matrix(t, conn))
}

// TestMigrationCreatesEveryRole checks that schema.Roles (which the grants
// check and the services use) and migration 0011 agree.
func TestMigrationCreatesEveryRole(t *testing.T) {
	t.Parallel()
	conn := connect(t, testdb.New(t))
	for _, r := range schema.Roles {
		var login bool
		require.NoError(t, conn.QueryRow(t.Context(), `SELECT rolcanlogin FROM pg_roles WHERE rolname = $1`, r).Scan(&login), r)
		require.False(t, login, "%s is a group role: services log in as its members", r)
	}
}

// matrix renders the privileges the roles have on every relation of schema
// public, from the catalog: what grants.sql produced, not what it says.
func matrix(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	rows, err := conn.Query(t.Context(), `
		SELECT c.relname, r.rolname, a.privilege_type, NULL::text AS col, 0 AS attnum
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(c.relacl) a JOIN pg_roles r ON r.oid = a.grantee
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') AND r.rolname = ANY($1)
		UNION ALL
		SELECT c.relname, r.rolname, a.privilege_type, att.attname, att.attnum
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute att ON att.attrelid = c.oid,
		     aclexplode(att.attacl) a JOIN pg_roles r ON r.oid = a.grantee
		WHERE n.nspname = 'public' AND r.rolname = ANY($1)
		ORDER BY 1, 2, 3, 5`, schema.Roles)
	require.NoError(t, err)
	type key struct{ table, role string }
	privs := map[key]map[string][]string{} // privilege -> columns (nil: whole table)
	tables := map[string]bool{}
	for rows.Next() {
		var table, role, priv string
		var col *string
		var attnum int
		require.NoError(t, rows.Scan(&table, &role, &priv, &col, &attnum))
		tables[table] = true
		k := key{table, role}
		if privs[k] == nil {
			privs[k] = map[string][]string{}
		}
		cols, had := privs[k][priv]
		switch {
		case col == nil:
			privs[k][priv] = nil
		case had && cols == nil: // the whole table already
		default:
			privs[k][priv] = append(cols, *col)
		}
	}
	require.NoError(t, rows.Err())
	names := make([]string, 0, len(tables))
	for n := range tables {
		names = append(names, n)
	}
	sort.Strings(names)
	order := []string{"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"}
	var b strings.Builder
	b.WriteString("| table |")
	for _, r := range schema.Roles {
		fmt.Fprintf(&b, " %s |", strings.TrimPrefix(r, "opledger_"))
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(schema.Roles)) + "\n")
	for _, tname := range names {
		fmt.Fprintf(&b, "| `%s` |", tname)
		for _, r := range schema.Roles {
			var cell []string
			for _, p := range order {
				cols, ok := privs[key{tname, r}][p]
				if !ok {
					continue
				}
				if cols == nil {
					cell = append(cell, p)
				} else {
					cell = append(cell, p+" ("+strings.Join(cols, ", ")+")")
				}
			}
			fmt.Fprintf(&b, " %s |", strings.Join(cell, ", "))
		}
		b.WriteString("\n")
	}
	for _, o := range schema.OwnerOnly() {
		fmt.Fprintf(&b, "\nOwner only (no role has any privilege): `%s`.\n", o)
	}
	return b.String()
}

const (
	docPath    = "../docs/security.md"
	docBegin   = "<!-- grant matrix: generated by `go test ./schema/ -run TestGrantMatrixDoc -update`; do not edit -->\n"
	docEnd     = "<!-- end of grant matrix -->\n"
	docSection = "## Postgres\n"
)

// TestGrantMatrixDoc keeps the grant matrix in docs/security.md equal to
// the privileges grants.sql really gives (read back from the catalog), so
// the document cannot drift: change grants.sql and this fails until the
// document is regenerated with -update.
func TestGrantMatrixDoc(t *testing.T) {
	t.Parallel()
	conn := connect(t, testdb.New(t))
	want := matrix(t, conn)
	raw, err := os.ReadFile(docPath)
	require.NoError(t, err)
	doc := string(raw)
	i, j := strings.Index(doc, docBegin), strings.Index(doc, docEnd)
	if *update {
		if i < 0 || j < i {
			t.Fatalf("%s has no grant matrix markers; put these two lines under %q:\n%s%s", docPath, docSection, docBegin, docEnd)
		}
		doc = doc[:i+len(docBegin)] + want + doc[j:]
		require.NoError(t, os.WriteFile(docPath, []byte(doc), 0o644))
		return
	}
	if i < 0 || j < i {
		t.Fatalf("%s has no grant matrix between %q and %q", docPath, strings.TrimSpace(docBegin), strings.TrimSpace(docEnd))
	}
	if got := doc[i+len(docBegin) : j]; got != want {
		t.Fatalf("the grant matrix in %s is not what schema/grants.sql grants; run `go test ./schema/ -run TestGrantMatrixDoc -update`.\nwant:\n%s\ngot:\n%s",
			docPath, want, got)
	}
}
