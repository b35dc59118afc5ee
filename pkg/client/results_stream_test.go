package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/wire"
)

// tenantAccounts is a server with three tenant accounts: one with room
// for the tenant's bounded RESULTS, one with room for a smaller bound, one
// with room for none.
const tenantAccounts = `
accounts {
  ROOMY { jetstream: { max_memory: 1MB, max_file: 1GB, max_streams: 1 }
          users: [ { user: roomy, password: roomy-test-only } ] }
  MID   { jetstream: { max_memory: 1MB, max_file: 200MB, max_streams: 1 }
          users: [ { user: mid, password: mid-test-only } ] }
  TINY  { jetstream: { max_memory: 1MB, max_file: 32MB, max_streams: 1 }
          users: [ { user: tiny, password: tiny-test-only } ] }
}
`

// The RESULTS a client makes for its tenant is bounded in bytes and drops
// its oldest results when full, so that new ones still come in; in an
// account with less storage than the bound it gets the largest halving of
// it that fits, and below client.MinResultsMaxBytes none. Breaking it: no
// bound (a full account then refuses every new result), or no fallback
// (the client cannot make its stream in a small account).
func TestEnsureResultsStreamBounded(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, tenantAccounts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, tc := range []struct {
		user, tenant string
		maxBytes     int64
	}{
		{"roomy", "roomy", client.TenantResultsMaxBytes},
		{"mid", "mid", client.TenantResultsMaxBytes / 4},
		{"tiny", "tiny", -1},
	} {
		pw := tc.user + "-test-only"
		c, err := client.Connect(ns.URL(), tc.user, client.Tenant(tc.tenant), client.NATSOptions(nats.UserInfo(tc.user, pw)))
		require.NoError(t, err)
		t.Cleanup(c.Close)
		require.NoError(t, c.EnsureResultsStream(ctx, 0), tc.user)

		nc, err := nats.Connect(ns.URL(), nats.UserInfo(tc.user, pw))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		st, err := js.Stream(ctx, wire.StreamResults)
		require.NoError(t, err)
		cfg := st.CachedInfo().Config
		require.Equal(t, tc.maxBytes, cfg.MaxBytes, tc.user)
		require.Equal(t, jetstream.DiscardOld, cfg.Discard, tc.user)
		require.Equal(t, time.Hour, cfg.MaxAge, tc.user)
	}
}
