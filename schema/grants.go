package schema

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// GrantsSQL is schema/grants.sql: the privileges of every opledger role,
// applied by ApplyGrants after every migrate.
//
//go:embed grants.sql
var GrantsSQL string

// Roles are the NOLOGIN group roles that migrations/0011_service_roles.sql
// creates, one per part of opledger that touches the ledger. Services log in
// as users that are members of the roles of the parts their process runs.
var Roles = []string{
	"opledger_ingest", "opledger_dispatcher", "opledger_reconciler", "opledger_compensator",
	"opledger_maintainer", "opledger_relay", "opledger_operator",
}

// ErrUndecidedGrants says an object in the schema has no decision in
// schema/grants.sql.
var ErrUndecidedGrants = errors.New("schema objects without decided grants")

// OwnerOnly returns the objects grants.sql declares no role needs, from its
// "-- owner-only: <name>: <why>" lines.
func OwnerOnly() []string {
	var names []string
	sc := bufio.NewScanner(strings.NewReader(GrantsSQL))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "-- owner-only:")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSpace(rest), ":")
		if name = strings.TrimSpace(name); name != "" {
			names = append(names, name)
		}
	}
	return names
}

// undecided lists the tables, views, sequences and routines in schema public
// (not an extension's) on which no opledger role has any privilege, table-
// or column-level. Sequences behind identity columns are decided with their
// table: inserting uses them without a grant.
const undecided = `
WITH roles AS (
    SELECT oid FROM pg_roles WHERE rolname = ANY($1::text[])
), objs AS (
    SELECT c.oid, c.relname AS name,
           CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view'
                          WHEN 'f' THEN 'foreign table' ELSE 'table' END AS kind,
           EXISTS (SELECT 1 FROM aclexplode(c.relacl) a WHERE a.grantee IN (SELECT oid FROM roles))
           OR EXISTS (SELECT 1 FROM pg_attribute att, aclexplode(att.attacl) a
                      WHERE att.attrelid = c.oid AND a.grantee IN (SELECT oid FROM roles)) AS granted,
           (c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                                        AND d.objid = c.oid AND d.deptype = 'i')) AS identity_seq,
           EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e') AS ext
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
    UNION ALL
    SELECT p.oid, p.proname, 'routine',
           EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee IN (SELECT oid FROM roles)),
           false,
           EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'public'
)
SELECT kind, name FROM objs
WHERE NOT granted AND NOT identity_seq AND NOT ext AND NOT (name = ANY($2::text[]))
ORDER BY kind, name`

// ApplyGrants applies schema/grants.sql in one transaction and commits it
// only when every table, view, sequence and routine in schema public has a
// decision there; otherwise it rolls back (the privileges stay as they were)
// and returns an error wrapping ErrUndecidedGrants that names each object
// and says how to decide it.
func ApplyGrants(ctx context.Context, conn *pgx.Conn) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, GrantsSQL); err != nil {
			return fmt.Errorf("grants: apply schema/grants.sql: %w", err)
		}
		rows, err := tx.Query(ctx, undecided, Roles, OwnerOnly())
		if err != nil {
			return fmt.Errorf("grants: check: %w", err)
		}
		objs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
			var kind, name string
			err := r.Scan(&kind, &name)
			return kind + " " + name, err
		})
		if err != nil {
			return fmt.Errorf("grants: check: %w", err)
		}
		if len(objs) > 0 {
			return fmt.Errorf("grants: %s: no opledger role may use %s. Decide in schema/grants.sql: "+
				"GRANT what each role's queries need, or add a line \"-- owner-only: <name>: <why>\" "+
				"(see docs/security.md); the migration is applied, the grants were not: %w",
				strings.Join(objs, ", "), pluralIt(len(objs)), ErrUndecidedGrants)
		}
		return nil
	})
}

func pluralIt(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}
