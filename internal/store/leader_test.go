package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
)

// A leader that goes silent without its connection being closed (its host
// lost power, the network split) must not keep the maintenance lock: the
// server ends its session once it has been idle for the lock's TTL, and
// another instance can lead. A crash is the easy case: the kernel closes
// the socket and the session ends at once.
//
// Breaking it: without the session's idle timeout (and TCP keepalives, for
// servers reached over TCP) the silent holder's session stays, and with it
// the lock, until the operating system gives up on the connection (two
// hours by default): no sweeper, no re-drive meanwhile.
func TestLeaderLockEndsWithASilentHolder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := store.Open(ctx, testdb.New(t), store.Options{})
	require.NoError(t, err)
	t.Cleanup(st.Close)

	const ttl = time.Second
	silent, err := st.TryLead(ctx, "silent", ttl)
	require.NoError(t, err)
	require.NotNil(t, silent)
	t.Cleanup(silent.Release) // before st.Close, which waits for it
	other, err := st.TryLead(ctx, "other", ttl)
	require.NoError(t, err)
	require.Nil(t, other, "the lock is held")

	// silent never heartbeats again.
	require.Eventually(t, func() bool {
		l, err := st.TryLead(ctx, "other", ttl)
		if err != nil || l == nil {
			return false
		}
		l.Release()
		return true
	}, 10*ttl, 100*time.Millisecond, "the silent holder kept the lock")
	require.Error(t, silent.Heartbeat(ctx), "the silent holder must find out it lost the lock")
}
