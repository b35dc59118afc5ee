package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// bundle is one whole opledger in this process and a client connected to it.
type bundle struct {
	stack *app.Stack
	cl    *client.Client
	js    jetstream.JetStream // a second connection, for what the test does by hand
	ctx   context.Context
}

// startNATS starts an embedded JetStream with no streams, configured by
// conf ("": none), for the tests that need a server and nothing else.
func startNATS(t *testing.T, conf string) *natsembed.Server {
	t.Helper()
	var opts natsembed.Options
	if conf != "" {
		opts.ConfigFile = filepath.Join(t.TempDir(), "nats.conf")
		require.NoError(t, os.WriteFile(opts.ConfigFile, []byte(conf), 0o600))
	}
	ns, err := natsembed.Start(opts)
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	return ns
}

// setup starts opledger on a fresh database with two relays (so results can
// arrive out of order) and fast reconciliation. services limits what runs
// (all when empty).
func setup(t testing.TB, services ...string) *bundle {
	t.Helper()
	d, err := app.StartStack(context.Background(), app.StackConfig{
		Infra: app.InfraConfig{DatabaseURL: testdb.New(t), MemoryStreams: true},
		Services: app.ServicesConfig{Run: services, Relays: 2,
			Reconcile: reconcile.Config{SettleDelay: 500 * time.Millisecond},
			Maintain:  maintain.Config{SweepInterval: 200 * time.Millisecond, ElectInterval: 100 * time.Millisecond}},
	})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	cl, err := client.Connect(d.Infra.NATSURL, "client-test")
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	_, js := connectJS(t, d.Infra.NATSURL)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &bundle{stack: d, cl: cl, js: js, ctx: ctx}
}

// connectJS opens a plain NATS connection to url, for what a test does by
// hand, closed when the test ends.
func connectJS(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

// capture is a capture_payment intent of cents for order.
func capture(wf, eventID, order string, cents int) wire.Intent {
	return wire.Intent{EventID: eventID, WorkflowID: wf, Tool: "capture_payment",
		Args: json.RawMessage(fmt.Sprintf(`{"order_id":%q,"customer_id":"cust_1","amount_cents":%d,"currency":"USD"}`, order, cents))}
}

// collect reads ch until a result satisfies stop, and returns everything read.
func collect[T any](t *testing.T, ctx context.Context, ch <-chan T, stop func(T) bool) []T {
	t.Helper()
	var got []T
	for {
		select {
		case r, ok := <-ch:
			require.True(t, ok, "channel closed early; got %d results", len(got))
			got = append(got, r)
			if stop(r) {
				return got
			}
		case <-ctx.Done():
			t.Fatalf("no result came that ends the wait; got %d: %+v", len(got), got)
		}
	}
}

func TestSubmitNewIntent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ans, err := b.cl.Submit(b.ctx, capture("wf_new", "conv_1:call_1", "order_1", 4900))
	require.NoError(t, err)
	require.Equal(t, op.DecisionNew, ans.Decision())
	require.Equal(t, "conv_1:call_1", ans.EventID)
	require.True(t, strings.HasPrefix(ans.OperationID, "op_"), ans.OperationID)
	require.Equal(t, client.StatusPendingDispatch, ans.Status)
	require.Equal(t, string(ans.Status), ans.Result.Result.Status, "typed and wire status agree")
	require.True(t, ans.Accepted())
	require.False(t, ans.AtRest())
	require.NotEmpty(t, ans.MsgID)
}

// The same event id again: the ledger answers the resend duplicate_event
// (the client sends no Nats-Msg-Id, so JetStream cannot drop it). Submit returns the first answer either way, and
// SubmitAndWait follows its operation.
func TestSubmitSameEventIDAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in := capture("wf_again", "conv_1:call_1", "order_1", 4900)
	first, err := b.cl.Submit(b.ctx, in)
	require.NoError(t, err)

	again, err := b.cl.Submit(b.ctx, in)
	require.NoError(t, err)
	require.False(t, first.Earlier)
	require.True(t, again.Earlier, "read from before the resend: the resend itself started nothing")
	again.Earlier = false
	require.Equal(t, first.Result, again.Result, "the answer to the first publish")

	// Without the header too the ledger sees the resend and answers
	// duplicate_event.
	watch, err := b.cl.Watch(b.ctx, wire.ResultSubject("wf_again"))
	require.NoError(t, err)
	in.Spec = wire.SpecIntent
	body, err := json.Marshal(in)
	require.NoError(t, err)
	_, err = b.js.Publish(b.ctx, wire.IntentSubject("wf_again"), body)
	require.NoError(t, err)
	dupEvent := collect(t, b.ctx, watch, func(r client.Result) bool { return r.Decision() == op.DecisionDuplicateEvent })
	require.Equal(t, first.OperationID, dupEvent[len(dupEvent)-1].OperationID)

	third, err := b.cl.Submit(b.ctx, in)
	require.NoError(t, err)
	require.Equal(t, first.MsgID, third.MsgID, "still the first answer, not the duplicate_event")

	final, err := b.cl.SubmitAndWait(b.ctx, in)
	require.NoError(t, err)
	require.Equal(t, first.OperationID, final.OperationID)
	require.Equal(t, client.StatusCompletedSuccess, final.Status)
	require.Equal(t, 1, b.stack.Vendors.Stats().Captures)
}

// The same action under a new event id is answered duplicate_operation;
// waiting on it follows the existing operation to its end.
func TestSubmitDuplicateOperation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, err := b.cl.Submit(b.ctx, capture("wf_dupop", "conv_1:call_1", "order_1", 4900))
	require.NoError(t, err)
	retry := capture("wf_dupop", "conv_1:call_2", "order_1", 4900)
	ans, err := b.cl.Submit(b.ctx, retry)
	require.NoError(t, err)
	require.Equal(t, op.DecisionDuplicateOperation, ans.Decision())
	require.Equal(t, "conv_1:call_2", ans.EventID)
	require.Equal(t, first.OperationID, ans.OperationID)
	require.True(t, ans.Accepted())

	final, err := b.cl.SubmitAndWait(b.ctx, retry)
	require.NoError(t, err)
	require.Equal(t, first.OperationID, final.OperationID)
	require.Equal(t, client.StatusCompletedSuccess, final.Status)
	require.True(t, final.Final)
	require.Equal(t, 1, b.stack.Vendors.Stats().Captures)
}

// A duplicate_operation from another workflow: the answer comes on the
// asking workflow's subject, the operation's results on its own. The vendor
// is slow, so the answer is not final and SubmitAndWait must look there.
func TestSubmitAndWaitAcrossWorkflows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.stack.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultLatency, Delay: 1500 * time.Millisecond}))
	first, err := b.cl.Submit(b.ctx, capture("wf_owner", "conv_1:call_1", "order_1", 4900))
	require.NoError(t, err)

	final, err := b.cl.SubmitAndWait(b.ctx, capture("wf_other", "conv_2:call_1", "order_1", 4900))
	require.NoError(t, err)
	require.Equal(t, first.OperationID, final.OperationID)
	require.Equal(t, client.StatusCompletedSuccess, final.Status)
	require.Equal(t, "wf_owner", final.WorkflowID, "found on the owning workflow's subject")

	other, err := b.cl.Watch(b.ctx, wire.ResultSubject("wf_other"))
	require.NoError(t, err)
	got := collect(t, b.ctx, other, func(client.Result) bool { return true })
	require.Equal(t, op.DecisionDuplicateOperation, got[0].Decision())
	require.False(t, got[0].AtRest(), "the answer was not final, so the wait had to follow the operation elsewhere")
}

// Refusals: intents the client refuses before sending, and those the ledger
// answers with a rejection or a conflict, which end a wait at once.
func TestSubmitRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wf := "wf_refused"

	intents, err := b.js.Stream(b.ctx, wire.StreamIntents)
	require.NoError(t, err)
	before, err := intents.Info(b.ctx)
	require.NoError(t, err)
	valid := capture(wf, "conv_1:call_0", "order_0", 100)
	for _, tc := range []struct {
		name, want string
		edit       func(*wire.Intent)
	}{
		{"missing event_id", "event_id is required", func(in *wire.Intent) { in.EventID = "" }},
		{"event_id with leading space", "event_id must not start with white space", func(in *wire.Intent) { in.EventID = " conv_1" }},
		{"missing workflow_id", "workflow_id is required", func(in *wire.Intent) { in.WorkflowID = "" }},
		{"workflow_id with a dot", "workflow_id is required", func(in *wire.Intent) { in.WorkflowID = "wf.1" }},
		{"missing tool", "tool is required", func(in *wire.Intent) { in.Tool = "" }},
		{"missing args", "args must be a JSON object", func(in *wire.Intent) { in.Args = nil }},
		{"args an array", "args must be a JSON object", func(in *wire.Intent) { in.Args = json.RawMessage(`[1]`) }},
		{"args not JSON", "args must be a JSON object", func(in *wire.Intent) { in.Args = json.RawMessage(`{"a":`) }},
		{"wrong spec", "spec must be", func(in *wire.Intent) { in.Spec = "opledger.intent.v2" }},
	} {
		in := valid
		tc.edit(&in)
		_, err := b.cl.Submit(b.ctx, in)
		require.ErrorIs(t, err, client.ErrInvalidIntent, tc.name)
		require.ErrorIs(t, err, op.ErrInvalid, tc.name)
		require.ErrorContains(t, err, tc.want, tc.name)
		_, err = b.cl.SubmitAndWait(b.ctx, in)
		require.ErrorIs(t, err, client.ErrInvalidIntent, tc.name)
	}
	after, err := intents.Info(b.ctx)
	require.NoError(t, err)
	require.Equal(t, before.State.Msgs, after.State.Msgs, "nothing was published")

	// Args failing the tool's schema: only the ledger knows.
	bad := capture(wf, "conv_1:call_1", "order_1", 4900)
	bad.Args = json.RawMessage(`{"order_id":"order_1","amount_cents":4900,"currency":"USD"}`)
	ans, err := b.cl.Submit(b.ctx, bad)
	require.NoError(t, err)
	require.Equal(t, op.DecisionRejected, ans.Decision())
	require.Equal(t, client.StatusRejected, ans.Status)
	require.Empty(t, ans.OperationID)
	require.Contains(t, ans.Reason, "customer_id")
	require.True(t, ans.AtRest())
	require.False(t, ans.Accepted())
	res, err := b.cl.SubmitAndWait(b.ctx, bad)
	require.NoError(t, err)
	require.True(t, res.Earlier, "the same refused event again: its answer was already there")
	res.Earlier = false
	require.Equal(t, ans.Result, res)

	// The same key with other arguments: a conflict that names the operation
	// holding the key. The wait ends at the conflict; it does not follow that
	// operation.
	held, err := b.cl.SubmitAndWait(b.ctx, capture(wf, "conv_1:call_2", "order_2", 4900))
	require.NoError(t, err)
	require.Equal(t, client.StatusCompletedSuccess, held.Status)
	other := capture(wf, "conv_1:call_3", "order_2", 4900)
	other.Args = json.RawMessage(`{"order_id":"order_2","customer_id":"cust_999","amount_cents":4900,"currency":"USD"}`)
	res, err = b.cl.SubmitAndWait(b.ctx, other)
	require.NoError(t, err)
	require.Equal(t, op.DecisionConflict, res.Decision())
	require.Equal(t, client.StatusRejected, res.Status)
	require.Equal(t, held.OperationID, res.OperationID)

	// Over the approval threshold without saying who proposes it: refused,
	// since nobody could be kept from approving their own call.
	big := capture(wf, "conv_1:call_4", "order_4", 2000000)
	res, err = b.cl.SubmitAndWait(b.ctx, big)
	require.NoError(t, err)
	require.Equal(t, client.StatusRejected, res.Status)
	require.Contains(t, res.Reason, "send actor")

	// With its proposer: the wait ends where a person must act.
	big.EventID, big.Actor = "conv_1:call_5", &wire.Actor{Type: "agent", ID: "support-bot"}
	res, err = b.cl.SubmitAndWait(b.ctx, big)
	require.NoError(t, err)
	require.Equal(t, client.StatusAwaitingApproval, res.Status)
	require.True(t, res.Status.NeedsPerson())
	require.False(t, res.Status.Final())
	require.True(t, res.AtRest())
}

func TestSubmitAndWaitCompletes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.cl.SubmitAndWait(b.ctx, capture("wf_done", "conv_1:call_1", "order_1", 4900))
	require.NoError(t, err)
	require.Equal(t, client.StatusCompletedSuccess, res.Status)
	require.True(t, res.Final)
	require.True(t, res.Status.Final())
	require.Equal(t, op.RecommendNone, res.RetryRecommendation)
	require.True(t, strings.HasPrefix(res.ExternalObjectID, "ch_"), res.ExternalObjectID)
	require.GreaterOrEqual(t, res.Version, int64(4), "create, enqueue, dispatch, outcome")
	require.Equal(t, 1, b.stack.Vendors.Stats().Captures)
}

// The vendor charges the card and the response is lost: the operation goes
// to unknown_outcome, the reconciler finds the charge, and the wait ends with
// the one final result; the card was charged once.
func TestSubmitAndWaitThroughUnknownOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.stack.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultTimeoutAfterCommit}))
	wf := "wf_unknown"
	res, err := b.cl.SubmitAndWait(b.ctx, capture(wf, "conv_1:call_1", "order_1", 4900))
	require.NoError(t, err)
	require.Equal(t, client.StatusCompletedSuccess, res.Status)
	require.True(t, res.Final)

	st := b.stack.Vendors.Stats()
	require.Equal(t, 1, st.FaultsFired)
	require.Equal(t, 1, st.Captures, "charged once")
	require.Equal(t, 1, st.Requests[vendors.RouteCapture], "never sent again")

	watch, err := b.cl.Watch(b.ctx, wire.ResultSubject(wf))
	require.NoError(t, err)
	got := collect(t, b.ctx, watch, func(r client.Result) bool { return r.Version == res.Version })
	var statuses []client.Status
	finals := 0
	for _, r := range got {
		require.Equal(t, res.OperationID, r.OperationID)
		statuses = append(statuses, r.Status)
		if r.AtRest() {
			finals++
		}
	}
	require.Contains(t, statuses, client.StatusUnknownOutcome, "the outcome was unknown on the way")
	require.Equal(t, 1, finals, "one final result: %v", statuses)
}

// Dedupe and order: a result message delivered twice (same Nats-Msg-Id) and
// an operation's older or equal version arriving after a newer one are
// dropped, by a live subscription and by one reading the stream afresh.
func TestResultsDropRepeatsAndStaleVersions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wf := "wf_order"
	subject := wire.ResultSubject(wf)
	final, err := b.cl.SubmitAndWait(b.ctx, capture(wf, "conv_1:call_1", "order_1", 4900))
	require.NoError(t, err)
	dup, err := b.cl.Submit(b.ctx, capture(wf, "conv_1:call_2", "order_1", 4900))
	require.NoError(t, err)
	require.Equal(t, op.DecisionDuplicateOperation, dup.Decision())
	live, err := b.cl.Watch(b.ctx, subject)
	require.NoError(t, err)
	delivered := collect(t, b.ctx, live, func(r client.Result) bool { return r.MsgID == dup.MsgID })
	answer := delivered[0]
	require.Equal(t, op.DecisionNew, answer.Decision())
	require.Less(t, answer.Version, final.Version)

	// The stream's 2-minute duplicate window would drop a repeat before any
	// client saw it; a relay republishing later is not dropped. Shorten the
	// window so the test can store such a repeat.
	results, err := b.js.Stream(b.ctx, wire.StreamResults)
	require.NoError(t, err)
	cfg := results.CachedInfo().Config
	cfg.Duplicates = 100 * time.Millisecond
	_, err = b.js.UpdateStream(b.ctx, cfg)
	require.NoError(t, err)
	info, err := results.Info(b.ctx, jetstream.WithSubjectFilter(subject))
	require.NoError(t, err)
	before := info.State.Subjects[subject]

	publish := func(r wire.Result, msgID string) *jetstream.PubAck {
		data, err := json.Marshal(r)
		require.NoError(t, err)
		m := nats.NewMsg(subject)
		m.Data = data
		m.Header.Set(wire.HeaderMsgID, msgID)
		ack, err := b.js.PublishMsg(b.ctx, m)
		require.NoError(t, err)
		return ack
	}
	// The duplicate_operation answer again, under its own message id (the
	// version rule does not apply to answers), once the window lets it in.
	require.Eventually(t, func() bool { return !publish(dup.Result.Result, dup.MsgID).Duplicate },
		10*time.Second, 50*time.Millisecond, "the repeat was never stored")
	// An older and an equal version under new message ids, after the newer one.
	publish(answer.Result, "msg_test_stale")
	publish(final.Result, "msg_test_same_version")
	// A sentinel of another operation: once it arrives, the others were read.
	sentinel := answer.Result
	sentinel.OperationID, sentinel.EventID, sentinel.Version = "op_sentinel", "conv_1:sentinel", 1
	publish(sentinel, "msg_test_sentinel")

	info, err = results.Info(b.ctx, jetstream.WithSubjectFilter(subject))
	require.NoError(t, err)
	require.Equal(t, before+4, info.State.Subjects[subject], "the stream holds what the client must drop")

	isSentinel := func(r client.Result) bool { return r.OperationID == "op_sentinel" }
	got := collect(t, b.ctx, live, isSentinel)
	require.Len(t, got, 1, "the live subscription dropped the repeat and the stale versions: %+v", got)

	fresh, err := b.cl.Watch(b.ctx, subject)
	require.NoError(t, err)
	got = collect(t, b.ctx, fresh, isSentinel)
	require.Equal(t, append(delivered, got[len(got)-1]), got, "a fresh read drops the same")

	// Results (the wire type) applies the same rules.
	wireResults, err := b.cl.Results(b.ctx, subject)
	require.NoError(t, err)
	gotWire := collect(t, b.ctx, wireResults, func(r wire.Result) bool { return r.OperationID == "op_sentinel" })
	require.Len(t, gotWire, len(delivered)+1)
	for i, r := range delivered {
		require.Equal(t, r.Result, gotWire[i])
	}
}

// clientGoroutines counts goroutines running this package's code or a
// JetStream consumer. (JetStream's one goroutine per connection that has
// published is not counted: it ends with the connection.)
func clientGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "resetPendingAcksOnReconnect") {
			continue
		}
		if strings.Contains(g, "opledger/pkg/client.") || strings.Contains(g, "nats.go/jetstream.") {
			n++
		}
	}
	return n
}

// Contexts that end, and a client that closes, close every channel at once
// and leave no goroutine behind. Nothing dispatches in this stack, so no
// operation ever gets past pending_dispatch. Not parallel: it counts
// goroutines, and parallel tests wait while it runs.
func TestContextEndClosesEverything(t *testing.T) {
	b := setup(t, app.PlannerIngest)
	wf := "wf_stuck"
	baseline := clientGoroutines()

	ctx, cancel := context.WithTimeout(b.ctx, 500*time.Millisecond)
	defer cancel()
	res, err := b.cl.SubmitAndWait(ctx, capture(wf, "conv_1:call_1", "order_1", 4900))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, client.StatusPendingDispatch, res.Status, "the last result seen comes back")
	require.Equal(t, op.DecisionNew, res.Decision())

	// A channel whose context ends is closed, having delivered what there was.
	ctx, cancel = context.WithTimeout(b.ctx, 500*time.Millisecond)
	defer cancel()
	watch, err := b.cl.Watch(ctx, wire.ResultSubject(wf))
	require.NoError(t, err)
	results, err := b.cl.Results(ctx, wire.ResultSubject(wf))
	require.NoError(t, err)
	guard := time.After(10 * time.Second)
	for n := 0; watch != nil || results != nil; {
		select {
		case _, ok := <-watch:
			if !ok {
				require.Equal(t, 1, n, "the answer, then closed")
				watch = nil
			}
			n++
		case _, ok := <-results:
			if !ok {
				results = nil
			}
		case <-guard:
			t.Fatal("a channel stayed open after its context ended")
		}
	}
	require.Eventually(t, func() bool { return clientGoroutines() <= baseline }, 10*time.Second, 20*time.Millisecond,
		"goroutines left behind: %d, baseline %d", clientGoroutines(), baseline)

	// Closing the client closes the channels of contexts that never end, and
	// interrupts waits.
	cl, err := client.Connect(b.stack.Infra.NATSURL, "closing")
	require.NoError(t, err)
	open, err := cl.Watch(context.Background(), wire.ResultSubject(wf))
	require.NoError(t, err)
	waitErr := make(chan error, 1)
	go func() {
		_, err := cl.SubmitAndWait(context.Background(), capture(wf, "conv_1:call_2", "order_2", 4900))
		waitErr <- err
	}()
	<-open // the first answer: the subscription is live
	cl.Close()
	for range open {
	}
	require.ErrorIs(t, <-waitErr, client.ErrClosed)
	_, err = cl.Submit(context.Background(), capture(wf, "conv_1:call_3", "order_3", 4900))
	require.ErrorIs(t, err, client.ErrClosed)
	_, err = cl.Watch(context.Background(), wire.ResultSubject(wf))
	require.ErrorIs(t, err, client.ErrClosed)
	require.Eventually(t, func() bool { return clientGoroutines() <= baseline }, 10*time.Second, 20*time.Millisecond,
		"goroutines left behind after Close: %d, baseline %d", clientGoroutines(), baseline)
}
