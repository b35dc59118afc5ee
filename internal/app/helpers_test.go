package app_test

import (
	"time"

	"github.com/opledger/opledger/internal/reconcile"
)

// reconcileFast keeps sweeps and lookups quick in tests.
var reconcileFast = reconcile.Config{SweepInterval: 200 * time.Millisecond, SettleDelay: 500 * time.Millisecond}
