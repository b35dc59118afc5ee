package main

import (
	"fmt"
	"slices"
	"strings"
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

// Scattered order ids still name their run and intent, and are unique, but
// sort in no order: consecutive intents' keys land far apart in an index.
func TestScatteredOrderIDs(t *testing.T) {
	t.Parallel()
	require.Equal(t, "rx_steady_7", orderIDOf("rx_steady", 7, false))
	seen := map[string]bool{}
	var ids []string
	for i := range 1000 {
		id := orderIDOf("rx_steady", i, true)
		require.True(t, strings.HasSuffix(id, fmt.Sprintf("_rx_steady_%d", i)), id)
		require.False(t, seen[id])
		seen[id] = true
		ids = append(ids, id)
	}
	require.Equal(t, ids[5], orderIDOf("rx_steady", 5, true), "the same for the same run and intent")
	// In sorted order, neighbours are rarely consecutive intents.
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	adjacent := 0
	for k := 1; k < len(sorted); k++ {
		a, b := slices.Index(ids, sorted[k-1]), slices.Index(ids, sorted[k])
		if b-a == 1 || a-b == 1 {
			adjacent++
		}
	}
	require.Less(t, adjacent, 20, "sorted neighbours that are consecutive intents")
}
