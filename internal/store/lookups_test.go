package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// The reconciler's lookup counter belongs to one episode of an ambiguous
// outcome (the operation's version while it waits): failures add up within
// it, a newer version starts from zero, and a writer still holding an older
// version than the counter's changes nothing. Retention deletes only the
// counters of episodes that are over.
//
// Breaking it: a counter that did not reset would escalate a new episode
// at its first failed lookup; one an older writer could reset would let
// lookups fail forever; retention of live counters would do the same.
func TestLookupCounterPerEpisode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o, _ := b.claimed(t, "k_lookups")
	v := o.Version
	note := func(version int64, failed bool) store.Lookups {
		t.Helper()
		n, err := b.store.NoteLookup(b.ctx, o.ID, version, failed, 10*time.Second)
		require.NoError(t, err)
		return n
	}
	require.Equal(t, store.Lookups{Failures: 1, Lookups: 1}, note(v, true))
	require.Equal(t, store.Lookups{Failures: 1, Lookups: 2}, note(v, false), "a lookup still settling is not a failure")
	require.Equal(t, store.Lookups{Failures: 2, Lookups: 3}, note(v, true))
	n, err := b.store.DeleteDoneLookups(b.ctx, -time.Hour, 10)
	require.NoError(t, err)
	require.Zero(t, n, "the operation is still at the version it counts: its episode goes on")

	require.Equal(t, store.Lookups{Failures: 1, Lookups: 1}, note(v+1, true), "a new episode counts from zero")
	require.Equal(t, store.Lookups{Moved: true}, note(v, true), "a late writer of the old episode changes nothing")
	require.Equal(t, store.Lookups{Failures: 2, Lookups: 2}, note(v+1, true))

	n, err = b.store.DeleteDoneLookups(b.ctx, time.Minute, 10)
	require.NoError(t, err)
	require.Zero(t, n, "over (the operation is not at that version), but it moved a moment ago")
	n, err = b.store.DeleteDoneLookups(b.ctx, -time.Hour, 10)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "an episode that is over is deleted")
}
