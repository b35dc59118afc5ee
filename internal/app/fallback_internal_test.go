package app

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/op"
)

// A group statement that fell back is counted by kind and cause; one that a
// known key does not explain is logged too.
func TestGroupFallbackIsCountedAndLogged(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := telemetry.NewMetrics(reg)
	var logs bytes.Buffer
	report := groupFallback(m, zerolog.New(&logs))

	report("submit", 12, fmt.Errorf("submit 12 intents at once: %w", op.ErrConflict))
	require.Empty(t, logs.String(), "a redelivery in the batch is expected, not logged")
	report("claim", 5, fmt.Errorf("x: %w", op.ErrRetryable))
	report("outcome", 3, errors.New("column reference is ambiguous"))

	metric := `
# HELP opledger_group_fallbacks_total Group-commit statements that failed, so that their writes went one by one, by kind (submit, claim, outcome) and cause (conflict: a known event id or key, expected for submits; retryable: a deadlock; other: worth a look).
# TYPE opledger_group_fallbacks_total counter
opledger_group_fallbacks_total{cause="conflict",kind="submit"} 1
opledger_group_fallbacks_total{cause="other",kind="outcome"} 1
opledger_group_fallbacks_total{cause="retryable",kind="claim"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, bytes.NewBufferString(metric), "opledger_group_fallbacks_total"))
	require.Contains(t, logs.String(), `"kind":"outcome","writes":3,"cause":"other"`)
	require.Contains(t, logs.String(), `"kind":"claim","writes":5,"cause":"retryable"`)
}
