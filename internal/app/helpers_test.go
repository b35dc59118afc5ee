package app_test

import (
	"time"

	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/reconcile"
)

// reconcileFast keeps sweeps and lookups quick in tests.
var reconcileFast = reconcile.Config{SettleDelay: 500 * time.Millisecond}

// maintainFast keeps sweeps quick in tests.
var maintainFast = maintain.Config{SweepInterval: 200 * time.Millisecond, ElectInterval: 100 * time.Millisecond}
