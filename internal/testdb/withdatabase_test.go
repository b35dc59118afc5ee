package testdb

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, host string }{
		{"postgres://u:secret@db.example:6543/app?sslmode=disable", "db.example"},
		{"postgresql://u:secret@db.example:6543/?dbname=app&sslmode=disable", "db.example"},
		{"host=db.example port=6543 user=u password=secret dbname=app sslmode=disable", "db.example"},
		{"host=/var/run/postgresql port=6543 user=u password=secret", "/var/run/postgresql"},
	} {
		out, err := withDatabase(tc.in, "testdb_1_ab_2")
		require.NoError(t, err, tc.in)
		cfg, err := pgconn.ParseConfig(out)
		require.NoError(t, err, out)
		require.Equal(t, "testdb_1_ab_2", cfg.Database, out)
		require.Equal(t, tc.host, cfg.Host, out)
		require.Equal(t, uint16(6543), cfg.Port, out)
		require.Equal(t, "u", cfg.User, out)
		require.Equal(t, "secret", cfg.Password, out)
	}
}
