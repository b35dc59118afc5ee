package schema_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/testdb"
)

// ANALYZE of the busiest ledger tables samples 3,000 rows, not 30,000
// (migration 0023): every column of each has a statistics target of 10,
// since the largest target among a table's columns sets its sample. A
// column added without it fails here.
func TestBusyTablesSampleFewRows(t *testing.T) {
	t.Parallel()
	conn := connect(t, testdb.New(t))
	rows, err := conn.Query(t.Context(), `
		SELECT c.relname || '.' || a.attname
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		WHERE c.relnamespace = current_schema()::regnamespace
		  AND c.relname IN ('operations', 'operation_events', 'attempts', 'inbox')
		  AND a.attnum > 0 AND NOT a.attisdropped
		  AND coalesce(a.attstattarget, -1) <> 10
		ORDER BY 1`)
	require.NoError(t, err)
	var wrong []string
	for rows.Next() {
		var col string
		require.NoError(t, rows.Scan(&col))
		wrong = append(wrong, col)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, wrong, "columns that would make ANALYZE sample 30,000 rows again: ALTER TABLE … ALTER COLUMN … SET STATISTICS 10")

	var tables int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(DISTINCT attrelid) FROM pg_attribute
		WHERE attrelid IN ('operations'::regclass, 'operation_events'::regclass, 'attempts'::regclass, 'inbox'::regclass)
		  AND attnum > 0 AND attstattarget = 10`).Scan(&tables))
	require.Equal(t, 4, tables, "the four tables exist, each with its columns at 10")
}

// The outbox's rows are compressed with LZ4 where the server has it
// (migration 0024), with pglz where it does not.
func TestOutboxValuesCompressWithLZ4(t *testing.T) {
	t.Parallel()
	conn := connect(t, testdb.New(t))
	var lz4 bool
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'`).Scan(&lz4))
	want := ""
	if lz4 {
		want = "l"
	}
	rows, err := conn.Query(t.Context(), `
		SELECT c.relname || '.' || a.attname, a.attcompression::text
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		WHERE c.relnamespace = current_schema()::regnamespace
		  AND c.relname IN ('outbox_batches', 'outbox') AND a.attnum > 0 AND NOT a.attisdropped
		  AND a.attstorage <> 'p'
		ORDER BY 1`)
	require.NoError(t, err)
	got := map[string]string{}
	for rows.Next() {
		var col, method string
		require.NoError(t, rows.Scan(&col, &method))
		got[col] = method
	}
	require.NoError(t, rows.Err())
	for _, col := range []string{"outbox_batches.subjects", "outbox_batches.msg_ids", "outbox_batches.headers",
		"outbox_batches.payloads", "outbox_batches.operation_ids", "outbox.headers", "outbox.payload"} {
		require.Contains(t, got, col)
		require.Equal(t, want, got[col], "%s (server has lz4: %v)", col, lz4)
	}
}
