package client_test

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// countingDialer dials NATS and counts the bytes the connection reads.
type countingDialer struct {
	net.Dialer
	read atomic.Int64
}

func (d *countingDialer) Dial(network, address string) (net.Conn, error) {
	c, err := d.Dialer.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, read: &d.read}, nil
}

type countedConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// countedClient is a client of b's opledger whose connection counts what it
// reads.
func (b *bundle) countedClient(t *testing.T) (*client.Client, *countingDialer) {
	t.Helper()
	d := &countingDialer{}
	cl, err := client.Connect(b.stack.Infra.NATSURL, "counted", client.NATSOptions(nats.SetCustomDialer(d)))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl, d
}

// history fills workflow wf with n completed operations' results.
func (b *bundle) history(t testing.TB, wf string, n int) {
	t.Helper()
	for i := range n {
		r, err := b.cl.SubmitAndWait(b.ctx, capture(wf, fmt.Sprintf("%s:call_%d", wf, i), fmt.Sprintf("%s_order_%d", wf, i), 100))
		require.NoError(t, err)
		require.Equal(t, client.StatusCompletedSuccess, r.Status)
	}
}

// A call reads only the results stored after it subscribed, so what it
// costs does not grow with its workflow's history: an agent's conversation
// is one workflow, and every call of it used to read all of that
// workflow's results still in the stream (an hour of them) before its own
// answer. Only a resend (an event id published before) reads the history,
// for the first publish's answer; it is measured beside them so that the
// test shows it would tell the two apart. Breaking it: a call that
// subscribes from the stream's start, or that does not trust an answer
// marked as the ledger's (wire.HeaderAnswer).
func TestCallsReadNoHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const wf = "wf_long"
	b.history(t, wf, 60)
	cl, d := b.countedClient(t)

	before := d.read.Load()
	r, err := cl.SubmitAndWatchFresh(b.ctx, capture(wf, wf+":call_fresh", wf+"_order_fresh", 100), nil)
	require.NoError(t, err)
	require.Equal(t, client.StatusCompletedSuccess, r.Status)
	require.Equal(t, op.DecisionNew, r.Decision())
	fresh := d.read.Load() - before

	before = d.read.Load()
	r, err = cl.SubmitAndWait(b.ctx, capture(wf, wf+":call_wait", wf+"_order_wait", 100))
	require.NoError(t, err)
	require.Equal(t, client.StatusCompletedSuccess, r.Status)
	require.Equal(t, op.DecisionNew, r.Decision())
	wait := d.read.Load() - before

	before = d.read.Load()
	ans, err := cl.Submit(b.ctx, capture(wf, wf+":call_59", wf+"_order_59", 100)) // the history's last call again
	require.NoError(t, err)
	resend := d.read.Load() - before
	require.Equal(t, op.DecisionNew, ans.Decision(), "the first publish's answer, from the history")
	require.True(t, ans.Earlier)

	t.Logf("bytes read: SubmitAndWatchFresh %d, SubmitAndWait %d, a resend of the history's last call %d", fresh, wait, resend)
	require.Greater(t, resend, int64(60_000), "a resend reads the history up to the first answer: 59 operations' results before it")
	require.Less(t, fresh, int64(12_000), "a fresh call reads its own few results, not the history")
	require.Less(t, wait, int64(12_000), "so does SubmitAndWait")
}

// A fresh call whose answer is a duplicate of an operation still in
// progress follows that operation: when it was created earlier in the same
// workflow, from the workflow's own history (the call deepens its
// subscription), without reading every workflow's results; when another
// workflow created it, from every workflow's results, as SubmitAndWait
// does. Breaking it: a fresh call that widens at once (it then reads the
// other workflows' results too), or one that never looks beyond what came
// after it subscribed (the operation of another workflow is then never
// seen to end).
func TestFreshDuplicateFollowsTheOperation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Results of other workflows, published within the minute a widened
	// subscription reads back.
	b.history(t, "wf_noise", 60)
	require.NoError(t, b.stack.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultLatency, Times: 2, Delay: 1500 * time.Millisecond}))
	first, err := b.cl.Submit(b.ctx, capture("wf_owner", "conv_1:call_1", "order_dup", 4900))
	require.NoError(t, err)
	require.False(t, first.AtRest())
	cl, d := b.countedClient(t)

	// answers keeps each call's answer: the first result it reports.
	var answers []client.Result
	answer := func() func(client.Result) {
		first := true
		return func(r client.Result) {
			if first {
				first = false
				answers = append(answers, r)
			}
		}
	}

	before := d.read.Load()
	same, err := cl.SubmitAndWatchFresh(b.ctx, capture("wf_owner", "conv_1:call_2", "order_dup", 4900), answer())
	require.NoError(t, err)
	sameBytes := d.read.Load() - before
	require.Equal(t, first.OperationID, same.OperationID)
	require.Equal(t, client.StatusCompletedSuccess, same.Status)

	first, err = b.cl.Submit(b.ctx, capture("wf_owner", "conv_1:call_3", "order_dup_2", 4900))
	require.NoError(t, err)
	require.False(t, first.AtRest())
	before = d.read.Load()
	other, err := cl.SubmitAndWatchFresh(b.ctx, capture("wf_other", "conv_2:call_1", "order_dup_2", 4900), answer())
	require.NoError(t, err)
	otherBytes := d.read.Load() - before
	require.Equal(t, first.OperationID, other.OperationID)
	require.Equal(t, client.StatusCompletedSuccess, other.Status)
	require.Equal(t, "wf_owner", other.WorkflowID, "found on the owning workflow's subject")

	require.Len(t, answers, 2)
	for _, a := range answers {
		require.Equal(t, op.DecisionDuplicateOperation, a.Decision())
		require.False(t, a.AtRest(), "the answer was not at rest, so the call had to follow the operation")
	}
	t.Logf("bytes read: duplicate from the same workflow %d, from another workflow %d", sameBytes, otherBytes)
	require.Greater(t, otherBytes, int64(60_000), "following into another workflow reads every workflow's recent results")
	require.Less(t, sameBytes, int64(20_000), "following within the workflow reads its history only")
}

// BenchmarkSubmitInALongWorkflow times a call in a workflow that already
// has 300 completed operations' results in the stream, one call at a time
// (go test -run '^$' -bench SubmitInALongWorkflow ./pkg/client, with
// DATABASE_URL or a private cluster): SubmitAndWait and
// SubmitAndWatchFresh (the doors' call) read only what comes after they
// subscribed; a resend of the workflow's first call reads the workflow's
// results from the stream's start, for the first publish's answer, as
// every call did before.
func BenchmarkSubmitInALongWorkflow(b *testing.B) {
	bd := setup(b)
	for _, kind := range []string{"wait", "fresh", "resend"} {
		wf, filled, i := "wf_bench_"+kind, false, 0
		b.Run(kind, func(b *testing.B) { // run again with a larger b.N
			if !filled {
				bd.history(b, wf, 300)
				filled = true
			}
			for b.Loop() {
				i++
				in := capture(wf, fmt.Sprintf("%s:b_%d", wf, i), fmt.Sprintf("%s_b_%d", wf, i), 100)
				var err error
				switch kind {
				case "wait":
					_, err = bd.cl.SubmitAndWait(bd.ctx, in)
				case "fresh":
					_, err = bd.cl.SubmitAndWatchFresh(bd.ctx, in, nil)
				default:
					var ans client.Answer
					ans, err = bd.cl.Submit(bd.ctx, capture(wf, wf+":call_0", wf+"_order_0", 100))
					if err == nil && !ans.Earlier {
						b.Fatal("a resend's answer is the first publish's")
					}
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The ledger marks its answers to intents (wire.HeaderAnswer), a resend's
// too, and nothing else: the later results of an operation carry the same
// event id and the decision new, and only the mark tells a client which
// result answered its publish. Breaking it: answers without the mark (a
// client then reads the workflow's history for every answer), or later
// results with it (a client takes one for its answer).
func TestLedgerMarksItsAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in := capture("wf_marks", "conv_1:call_1", "order_1", 100)
	_, err := b.cl.SubmitAndWait(b.ctx, in)
	require.NoError(t, err)
	_, err = b.cl.Submit(b.ctx, capture("wf_marks", "conv_1:call_2", "order_1", 100)) // duplicate_operation
	require.NoError(t, err)

	cons, err := b.js.OrderedConsumer(b.ctx, wire.StreamResults, jetstream.OrderedConsumerConfig{FilterSubjects: []string{wire.ResultSubject("wf_marks")}})
	require.NoError(t, err)
	marked := map[string]int{}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, nats.ErrTimeout) {
			break // all of them read
		}
		require.NoError(t, err)
		r, err := wire.DecodeResult(m.Data())
		require.NoError(t, err)
		key := string(r.DedupeDecision) + " " + r.Status
		if m.Headers().Get(wire.HeaderAnswer) == "1" {
			key += " marked"
		}
		marked[key]++
	}
	require.Equal(t, map[string]int{
		"new pending_dispatch marked":                  1,
		"new completed_success":                        1,
		"duplicate_operation completed_success marked": 1,
	}, marked)
}
