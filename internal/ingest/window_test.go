package ingest_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func email(eventID, reference string) wire.Intent {
	return wire.Intent{EventID: eventID, WorkflowID: "wf_win", Tool: "send_email",
		Args: json.RawMessage(`{"to":"pat@example.com","template":"payment_receipt","reference":"` + reference + `"}`)}
}

// The idempotency key decides before the dedupe window, also in a race. B
// (reference r_b) opens send_email's 24 h window for one address and
// template; A (reference r_a, another key) runs anyway with
// dedupe_override. C repeats A's key and arrives while A is being written:
// it passes the key check before A commits and waits for the window's lock
// (held here by the test to make the race certain). C must be answered as
// a duplicate of its own operation, A, never as suppressed by B's window.
//
// Breaking it: checking the key only before taking the window's lock (as
// the first version did) answers C "suppressed by the tool's dedupe window:
// operation <B> did the same", naming B.
func TestKeyWinsOverDedupeWindowInRace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.ingestIntent(t, email("evt_b", "r_b"))
	require.Equal(t, op.DecisionNew, first.Decision)
	opB := first.Result.OperationID

	// Hold the window's lock, as a concurrent submission with the same
	// dedupe key would.
	var dedupeKey string
	require.NoError(t, b.DB.QueryRow(b.Ctx, `SELECT dedupe_key FROM operations WHERE id = $1`, opB).Scan(&dedupeKey))
	require.NotEmpty(t, dedupeKey)
	tx, err := b.DB.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx) //nolint:errcheck // released below
	_, err = tx.Exec(b.Ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))`, "dedupe:"+dedupeKey)
	require.NoError(t, err)

	waiting := func(n int) func() bool {
		return func() bool {
			var got int
			require.NoError(t, b.DB.QueryRow(b.Ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&got))
			return got >= n
		}
	}
	ingestAsync := func(in wire.Intent) <-chan *ingest.Answer {
		subject, header, body := pipetest.IntentMsg(t, in)
		ch := make(chan *ingest.Answer, 1)
		go func() {
			ans, err := b.svc.Ingest(b.Ctx, subject, header, body)
			if err != nil {
				t.Errorf("ingest %s: %v", in.EventID, err)
			}
			ch <- ans
		}()
		return ch
	}
	// A queues for the lock first, C behind it: C has checked the key
	// before A commits, and takes the lock after A has committed.
	a := email("evt_a", "r_a")
	a.DedupeOverride = &wire.Override{Reason: "the customer asked for both receipts"}
	answeredA := ingestAsync(a)
	require.Eventually(t, waiting(1), 10*time.Second, 10*time.Millisecond, "A never waited for the window's lock")
	answered := ingestAsync(email("evt_c", "r_a"))
	require.Eventually(t, waiting(2), 10*time.Second, 10*time.Millisecond, "C never waited for the window's lock")
	require.NoError(t, tx.Rollback(b.Ctx))

	var ansA *ingest.Answer
	select {
	case ansA = <-answeredA:
	case <-time.After(20 * time.Second):
		t.Fatal("A was never answered")
	}
	require.NotNil(t, ansA)
	require.Equal(t, op.DecisionNew, ansA.Decision)
	var ansC *ingest.Answer
	select {
	case ansC = <-answered:
	case <-time.After(20 * time.Second):
		t.Fatal("C was never answered")
	}
	require.NotNil(t, ansC)
	require.Equal(t, op.DecisionDuplicateOperation, ansC.Decision)
	require.Equal(t, ansA.Result.OperationID, ansC.Result.OperationID, "C names its own operation, not %s", opB)
	require.NotContains(t, ansC.Result.Reason, "dedupe window")
}
