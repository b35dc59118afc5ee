package ingest_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Every intent gets an answer. An intent the ledger refuses to store used to
// be dropped with no inbox row and no result, and the agent waited forever
// (seen: a NUL byte in a text column). Validation now keeps such bytes out,
// so the refusal is simulated: a trigger makes Postgres refuse this one
// operation with a data exception, as it refuses a NUL in text. An intent on
// a subject that names no usable workflow had nowhere to be answered.
//
// Breaking it: dropping the intent on op.ErrInvalid leaves no answer for
// evt_nul; answering on opledger.results.<garbage> (or not at all) leaves
// nothing on wire.UnroutableSubject.
func TestEveryIntentIsAnswered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.DB.Exec(b.Ctx, `
		CREATE FUNCTION refuse_order_77() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.idempotency_key LIKE 'payment:ord_77:%' THEN
				RAISE EXCEPTION 'invalid byte sequence' USING ERRCODE = '22021';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_order_77 BEFORE INSERT ON operations FOR EACH ROW EXECUTE FUNCTION refuse_order_77();`)
	require.NoError(t, err)

	in := capture("evt_nul", "wf_1", "ord_77", "cust_1")
	ans := b.ingestIntent(t, in)
	require.Equal(t, op.DecisionRejected, ans.Decision)
	require.Len(t, b.resultsFor(t, "evt_nul"), 1, "answered on its workflow")
	require.Equal(t, wire.ResultSubject("wf_1"), b.Outbox(t)[len(b.Outbox(t))-1].Subject)
	require.Contains(t, ans.Result.Reason, "the ledger could not store this intent")
	entry, err := b.Store.InboxEntry(b.Ctx, ingest.Source, "evt_nul")
	require.NoError(t, err)
	require.Equal(t, op.DecisionRejected, entry.Decision)

	// A subject whose workflow token is not valid UTF-8: answered on the
	// protocol's fixed subject.
	body := []byte(`{"spec":"opledger.intent.v1"}`)
	ans = b.ingest(t, "opledger.intents.wf\xff", nil, body)
	require.Equal(t, op.DecisionRejected, ans.Decision)
	rows := b.Outbox(t)
	last := rows[len(rows)-1]
	require.Equal(t, wire.UnroutableSubject, last.Subject)
	require.Equal(t, string(op.StateRejected), last.Result(t).Status)
}

// Identical garbage is answered once: 300 copies of the same unreadable
// bytes make one inbox row and one answer, not 300 outbox rows, whether
// they are keyed by their hash (no usable Nats-Msg-Id) or by the valid
// Nats-Msg-Id every copy carries. The inbox keeps at most
// MaxRejectedPayload bytes of it.
//
// Breaking it: answering every duplicate of a rejection makes 300 result
// rows (as copies with a Nats-Msg-Id did); keeping the whole payload keeps
// 64 KiB.
func TestIdenticalGarbageIsAnsweredOnce(t *testing.T) {
	t.Parallel()
	garbage := make([]byte, 64<<10)
	for i := range garbage {
		garbage[i] = byte('a' + i%26)
	}
	sum := sha256.Sum256(garbage)
	for _, c := range []struct {
		name    string
		header  map[string]string
		eventID string
	}{
		{"by hash", nil, "sha256:" + hex.EncodeToString(sum[:])},
		{"by Nats-Msg-Id", map[string]string{wire.HeaderMsgID: "garbage-1"}, "garbage-1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			for range 300 {
				ans := b.ingest(t, "opledger.intents.wf_g", c.header, garbage)
				require.Contains(t, []op.Decision{op.DecisionRejected, op.DecisionDuplicateEvent}, ans.Decision)
			}
			require.Len(t, b.Outbox(t), 1, "one answer")
			entry, err := b.Store.InboxEntry(b.Ctx, ingest.Source, c.eventID)
			require.NoError(t, err)
			require.Equal(t, 299, entry.DuplicateCount)
			require.Len(t, entry.Payload, 1024, "a bounded prefix")
			require.Equal(t, hex.EncodeToString(sum[:]), entry.PayloadHash, "and the hash of the whole")
		})
	}
}

// A vendor that stays unreachable (429 on every try) exhausts the retry
// budget: the operation fails for good, and says that nothing was done and
// that the same request can be sent again later; the business key is not
// burnt. The same action under a new event id then reopens the operation
// (decision reopened, a new generation with its own budget) and it runs.
//
// Breaking it: recommending change_arguments leaves the agent nothing to
// do; answering duplicate_operation to the later intent leaves the action
// undoable forever.
func TestFailureWithoutEffectCanRunAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, b.Store, b.Bus, b.Registry, b.Adapters, nil, b.Log)
	tool := b.Tool(t, "capture_payment")
	require.NoError(t, b.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultRateLimit, Times: tool.Retry.MaxAttempts}))

	first := b.ingestIntent(t, capture("evt_a", "wf_1", "order_down", "cust_1"))
	o := b.Operation(t, first.Result.OperationID)
	for i := range tool.Retry.MaxAttempts {
		require.NoError(t, d.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)), "attempt %d", i+1)
	}
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StateFailedPermanent, o.State)
	require.Equal(t, op.CategoryRetriesExhausted, o.LastErrorCategory)
	require.True(t, o.Reopenable())
	res := b.resultsFor(t, "evt_a")
	final := res[len(res)-1]
	require.Equal(t, op.RecommendRetryLater, final.RetryRecommendation)
	require.Contains(t, final.SafeUserMessage, "Nothing was done")
	require.Zero(t, b.Vendors.Stats().Captures)

	again := b.ingestIntent(t, capture("evt_b", "wf_1", "order_down", "cust_1"))
	require.Equal(t, op.DecisionReopened, again.Decision)
	require.Equal(t, o.ID, again.Result.OperationID, "the same operation, under the same key")
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StatePendingDispatch, o.State)
	require.Equal(t, 2, o.Generation)
	require.NoError(t, d.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StateCompletedSuccess, o.State)
	require.Equal(t, 1, b.Vendors.Stats().Captures)
	require.Equal(t, tool.Retry.MaxAttempts+1, o.AttemptCount)

	// Completed operations are never reopened: a later intent is a duplicate.
	dup := b.ingestIntent(t, capture("evt_c", "wf_1", "order_down", "cust_1"))
	require.Equal(t, op.DecisionDuplicateOperation, dup.Decision)
	events, err := b.Store.Events(b.Ctx, o.ID)
	require.NoError(t, err)
	var names []string
	for _, e := range events {
		names = append(names, string(e.Event))
	}
	require.Contains(t, fmt.Sprint(names), "fail_retryable fail_permanent reopen dispatch succeed")
	var detail map[string]string
	for _, e := range events {
		if e.Event == op.EventReopen {
			require.NoError(t, json.Unmarshal(e.Detail, &detail))
		}
	}
	require.Equal(t, "evt_b", detail["event_id"])
}

// An intent whose subject cannot name a workflow is answered on the
// protocol's fixed subject: a token over the 200-byte limit, a token with
// a wildcard character, a wildcard token, too many tokens, a tenant that is
// not one. (Invalid UTF-8 is TestEveryIntentIsAnswered's.) Each body is a
// valid intent naming the subject's last token as its workflow, so only
// the subject is wrong.
//
// Breaking it: answering on opledger.results.<the bad token> publishes
// where no agent listens (or where a wildcard would fan it out).
func TestUnroutableSubjectsAreAnsweredOnTheFixedSubject(t *testing.T) {
	t.Parallel()
	b := setup(t)
	long := strings.Repeat("w", wire.MaxIDLen+1)
	for i, subject := range []string{
		"opledger.intents." + long,
		"opledger.intents.wf*",
		"opledger.intents.wf>1",
		"opledger.intents.>",
		"opledger.intents.*",
		"opledger.intents.acme.wf_1.extra",
		"opledger.intents.ACME!.wf_1",
	} {
		tokens := strings.Split(subject, ".")
		in := capture(fmt.Sprintf("evt_unroutable_%d", i), tokens[len(tokens)-1], fmt.Sprintf("ord_u%d", i), "cust_1")
		in.Spec = wire.SpecIntent
		body, err := json.Marshal(in)
		require.NoError(t, err)
		ans := b.ingest(t, subject, nil, body)
		require.Equal(t, op.DecisionRejected, ans.Decision, subject)
		rows := b.Outbox(t)
		last := rows[len(rows)-1]
		require.Equal(t, wire.UnroutableSubject, last.Subject, subject)
		require.Equal(t, string(op.StateRejected), last.Result(t).Status)
	}
}

// The last resort: an intent the ledger refuses even as a rejection (here a
// trigger refuses the inbox row with a data exception, as Postgres refuses
// bytes it cannot store) still gets an answer, published directly on its
// workflow's results subject, or on the fixed subject when the subject
// names none; the message is not redelivered forever.
//
// Breaking it: dropping the intent (as it was) leaves the agent waiting
// forever with nothing on RESULTS.
func TestUnstorableIntentIsStillAnswered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.DB.Exec(b.Ctx, `
		CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF position('poison'::bytea IN NEW.payload) > 0 THEN
				RAISE EXCEPTION 'invalid byte sequence' USING ERRCODE = '22021';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_poison BEFORE INSERT ON inbox FOR EACH ROW EXECUTE FUNCTION refuse_poison();`)
	require.NoError(t, err)
	stop, err := b.svc.Start(b.Ctx)
	require.NoError(t, err)
	defer stop()
	results, err := b.JS.Stream(b.Ctx, wire.StreamResults)
	require.NoError(t, err)
	for _, c := range []struct{ subject, answeredOn string }{
		{"opledger.intents.wf_poison", wire.ResultSubject("wf_poison")},
		{"opledger.intents.wf*", wire.UnroutableSubject},
	} {
		body := []byte("poison, not JSON: " + c.subject)
		_, err := b.JS.Publish(b.Ctx, c.subject, body)
		require.NoError(t, err)
		sum := sha256.Sum256(body)
		var got wire.Result
		require.Eventually(t, func() bool {
			m, err := results.GetLastMsgForSubject(b.Ctx, c.answeredOn)
			if err != nil {
				return false
			}
			got = wire.Result{}
			return json.Unmarshal(m.Data, &got) == nil && got.EventID == "sha256:"+hex.EncodeToString(sum[:])
		}, 10*time.Second, 20*time.Millisecond, "an answer on %s", c.answeredOn)
		require.Equal(t, string(op.StateRejected), got.Status)
		require.Contains(t, got.Reason, "could not store this intent")
	}
	require.Empty(t, b.Outbox(t), "nothing in the ledger")
}
