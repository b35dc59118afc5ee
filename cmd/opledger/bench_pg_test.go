package main

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/testdb"
)

// A window shorter than opening the connections still measures commits:
// the window opens once every connection is up, and each commits at least
// once. (Before, a loaded CI machine spent a 0.2 s window connecting, the
// rate was 0 and the ratio +Inf, which JSON cannot encode.)
func TestPGCommitRateNeverZero(t *testing.T) {
	t.Parallel()
	url := testdb.New(t)
	rate, err := pgCommitRate(t.Context(), url, 4, time.Nanosecond)
	require.NoError(t, err)
	require.Positive(t, rate)
	require.False(t, math.IsInf(rate, 0) || math.IsNaN(rate), "rate %v", rate)
}
