package app_test

import (
	"testing"
	"time"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/testdb"

	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/reconcile"
)

// reconcileFast keeps sweeps and lookups quick in tests.
var reconcileFast = reconcile.Config{SettleDelay: 500 * time.Millisecond}

// maintainFast keeps sweeps quick in tests.
var maintainFast = maintain.Config{SweepInterval: 200 * time.Millisecond, ElectInterval: 100 * time.Millisecond}

// roleUsers makes a login user in each service's and part's Postgres role
// (app.DBRoles) on the test database cs, for ServicesConfig.DatabaseURLs.
func roleUsers(t *testing.T, cs string) map[string]string {
	t.Helper()
	urls := map[string]string{}
	for part, role := range app.DBRoles {
		urls[part] = testdb.User(t, cs, role)
	}
	return urls
}
