package services_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/proctest"
	"github.com/opledger/opledger/pkg/client"
)

// TestIntentsFullWhileIngestDown stops planner-ingest while an agent keeps
// publishing. INTENTS, bounded (here by an operator's 16 KiB), fills and
// refuses what comes after: each refused publish is client.ErrIntentsFull,
// and what it stored stays. When planner-ingest is back, every stored
// intent is answered and settles, each action's effect happening once, and
// the refused intents, sent again, go through too.
//
// Breaking it: an unbounded INTENTS refuses nothing; one that drops the
// oldest when full loses stored intents, which then never settle.
func TestIntentsFullWhileIngestDown(t *testing.T) {
	t.Parallel()
	sys := proctest.Start(t, proctest.Options{})
	sys.BoundIntents(16 << 10)
	ingest := sys.Proc(proctest.Ingest1)
	ingest.Stop()

	sent := proctest.Batch{Prefix: "full", Captures: 60, NoDuplicates: true}.Intents()
	var refused []proctest.Sent
	for _, in := range sent {
		if err := sys.TryPublish(in.Intent); err != nil {
			require.ErrorIs(t, err, client.ErrIntentsFull, "publishing %s", in.Intent.EventID)
			refused = append(refused, in)
		}
	}
	stored := len(sent) - len(refused)
	t.Logf("INTENTS stored %d intents and refused %d", stored, len(refused))
	require.Greater(t, stored, 5)
	require.NotEmpty(t, refused, "a full INTENTS refuses")

	ingest.Start()
	ingest.WaitReady(time.Minute)
	for _, in := range refused {
		sys.PublishSent(in)
	}
	ops, took := sys.WaitSettled(settleTimeout)
	t.Logf("settled %s after planner-ingest came back", took.Round(time.Millisecond))
	// The batch's last intent is invalid: answered rejected, no operation.
	require.Len(t, ops, len(sent)-1, "every valid intent, stored before or sent again, is an operation")
	sys.CheckEffects(ops)
	sys.CheckOutbox(10)
}
