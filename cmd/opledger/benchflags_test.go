package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// -pg takes name=value settings, repeatable, and refuses anything else.
func TestPGSettingsFlag(t *testing.T) {
	p := pgSettingsFlag{}
	require.NoError(t, p.Set("shared_buffers=2GB"))
	require.NoError(t, p.Set("max_wal_size=4GB"))
	require.Equal(t, "max_wal_size=4GB,shared_buffers=2GB", p.String())
	for _, bad := range []string{"shared_buffers", "=2GB", "shared_buffers="} {
		require.Error(t, p.Set(bad), bad)
	}
}
