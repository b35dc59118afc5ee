package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// startSystem runs the whole pipeline against a fresh database: embedded
// NATS, local vendors, and every service with three dispatcher instances,
// each service and part logged in as its own user in its Postgres role.
func startSystem(t *testing.T, dispatchers int) *app.Stack {
	t.Helper()
	cs := testdb.New(t)
	d, err := app.StartStack(context.Background(), app.StackConfig{
		Infra: app.InfraConfig{DatabaseURL: cs, MemoryStreams: true},
		Services: app.ServicesConfig{Dispatchers: dispatchers, Relays: 2, DatabaseURLs: roleUsers(t, cs),
			Reconcile: reconcileFast, Maintain: maintainFast},
	})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

// intent is one message the test agent publishes.
type intent struct {
	in       wire.Intent
	noHeader bool // published with a plain NATS request, not the client (neither sets Nats-Msg-Id: the ledger dedupes)
}

func TestEndToEndExactlyOneEffectPerOperation(t *testing.T) {
	t.Parallel()
	d := startSystem(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Vendors misbehave the way the article says they do. Each fault performs
	// the effect and then loses the answer, so a naive retry would duplicate it.
	for _, f := range []vendors.Fault{
		{Route: vendors.RouteCapture, Kind: vendors.FaultError500AfterCommit, Times: 15},
		{Route: vendors.RouteCapture, Kind: vendors.FaultResetAfterCommit, Times: 10},
		{Route: vendors.RouteEmail, Kind: vendors.FaultTimeoutAfterCommit, Times: 5},
		{Route: vendors.RouteTicket, Kind: vendors.FaultRateLimit, Times: 10},
	} {
		require.NoError(t, d.Vendors.InjectFault(f))
	}

	const distinct, total = 600, 1000
	rng := rand.New(rand.NewPCG(1, 2))
	var base []wire.Intent
	for i := range distinct {
		wf := fmt.Sprintf("wf_%d", i%40)
		in := wire.Intent{EventID: fmt.Sprintf("conv_%d:call_%d", i%40, i), WorkflowID: wf}
		switch i % 3 {
		case 0:
			in.Tool = "capture_payment"
			in.Args = json.RawMessage(fmt.Sprintf(`{"order_id":"order_%d","customer_id":"cust_%d","amount_cents":%d,"currency":"USD"}`, i, i%7, 100+i))
		case 1:
			in.Tool = "send_email"
			in.Args = json.RawMessage(fmt.Sprintf(`{"to":"user%d@example.com","template":"payment_receipt","reference":"order_%d"}`, i, i))
		case 2:
			in.Tool = "create_ticket"
			in.Args = json.RawMessage(fmt.Sprintf(`{"conversation_id":"conv_%d","queue":"billing","summary":"refund request %d"}`, i, i))
		}
		base = append(base, in)
	}
	var msgs []intent
	for _, in := range base {
		msgs = append(msgs, intent{in: in})
	}
	// 20%: the same event id again (a redelivery), half through the client.
	for i := range total / 5 {
		msgs = append(msgs, intent{in: base[rng.IntN(distinct)], noHeader: i%2 == 0})
	}
	// 20%: the same action under a new event id (the agent retried).
	for i := range total / 5 {
		in := base[rng.IntN(distinct)]
		in.EventID = fmt.Sprintf("%s:retry_%d", in.EventID, i)
		msgs = append(msgs, intent{in: in})
	}
	require.Len(t, msgs, total)
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })

	cl, err := client.Connect(d.Infra.NATSURL, "e2e-agent")
	require.NoError(t, err)
	defer cl.Close()
	results, err := cl.Results(ctx, "opledger.results.>")
	require.NoError(t, err)
	nc, err := nats.Connect(d.Infra.NATSURL)
	require.NoError(t, err)
	defer nc.Close()

	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, m := range msgs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if !m.noHeader {
				err := cl.Publish(ctx, m.in, "")
				require.NoError(t, err)
				return
			}
			m.in.Spec = wire.SpecIntent
			data, _ := json.Marshal(m.in)
			_, err := nc.Request(wire.IntentSubject(m.in.WorkflowID), data, 5*time.Second) // JetStream answers a plain publish with a PubAck
			require.NoError(t, err)
		}()
	}
	wg.Wait()

	// Every event id gets an answer; every distinct operation reaches completed_success.
	eventIDs := map[string]bool{}
	for _, m := range msgs {
		eventIDs[m.in.EventID] = true
	}
	answered := map[string]bool{}
	final := map[string]wire.Result{}
	newest := map[string]int64{} // highest version seen per operation
	decisions := map[op.Decision]int{}
	for len(final) < distinct || len(answered) < len(eventIDs) {
		select {
		case r := <-results:
			answered[r.EventID] = true
			if r.DedupeDecision != op.DecisionNew { // answers to duplicates; "new" is counted in the ledger below
				decisions[r.DedupeDecision]++
			}
			if r.OperationID != "" {
				newest[r.OperationID] = max(newest[r.OperationID], r.Version)
			}
			if r.Final && r.OperationID != "" {
				final[r.OperationID] = r
			}
		case <-ctx.Done():
			t.Fatalf("timed out: %d/%d operations final, %d/%d event ids answered", len(final), distinct, len(answered), len(eventIDs))
		}
	}
	for id, r := range final {
		require.Equal(t, string(op.StateCompletedSuccess), r.Status, "operation %s: %s", id, r.Reason)
		require.Equal(t, newest[id], r.Version, "operation %s: the final result carries the highest version", id)
		require.GreaterOrEqual(t, r.Version, int64(4), "operation %s: create, enqueue, dispatch and outcome each counted", id)
	}
	require.Equal(t, total/5, decisions[op.DecisionDuplicateOperation], "every retry under a new event id is a duplicate operation")
	require.Equal(t, 0, decisions[op.DecisionConflict]+decisions[op.DecisionRejected])

	// At the vendors: exactly one side effect per distinct operation.
	time.Sleep(200 * time.Millisecond)
	st := d.Vendors.Stats()
	require.Equal(t, distinct/3, st.Captures, "charges")
	require.Equal(t, distinct/3, st.Emails, "emails")
	require.Equal(t, distinct/3, st.Tickets, "tickets")
	for kind, effects := range map[string]map[string]int{
		vendors.KindCapture: d.Vendors.EffectsByKey(vendors.KindCapture),
		vendors.KindEmail:   d.Vendors.EffectsByKey(vendors.KindEmail),
		vendors.KindTicket:  d.Vendors.EffectsByKey(vendors.KindTicket),
	} {
		require.Len(t, effects, distinct/3, kind)
		for key, n := range effects {
			require.Equal(t, 1, n, "%s %s happened %d times", kind, key, n)
		}
	}
	require.Positive(t, st.FaultsFired, "the faults were exercised")

	// The ledger agrees.
	states, err := d.Services.Store.CountByState(ctx)
	require.NoError(t, err)
	require.Equal(t, map[op.State]int64{op.StateCompletedSuccess: distinct}, states)
	counts, err := d.Services.Store.DecisionCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(distinct), counts[op.DecisionNew])
	require.Equal(t, int64(total/5), counts[op.DecisionDuplicateOperation])
	require.Positive(t, counts[op.DecisionDuplicateEvent], "redeliveries without Nats-Msg-Id reached the ledger and were suppressed there")
}
