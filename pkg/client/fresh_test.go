package client_test

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
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

// SubmitAndWatchFresh (the HTTP and MCP doors' call) reads only the results
// stored after it subscribed, so what a call costs does not grow with its
// workflow's history: an agent's conversation is one workflow, and every
// call of it used to read all of that workflow's results still in the
// stream (an hour of them) before its own answer. SubmitAndWait, which
// answers a resend with the first publish's answer, still reads them; it is
// measured beside it so that the test shows it would tell the two apart.
// Breaking it: a fresh call that subscribes from the stream's start.
func TestFreshCallReadsNoHistory(t *testing.T) {
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
	r, err = cl.SubmitAndWait(b.ctx, capture(wf, wf+":call_whole", wf+"_order_whole", 100))
	require.NoError(t, err)
	require.Equal(t, client.StatusCompletedSuccess, r.Status)
	whole := d.read.Load() - before

	t.Logf("bytes read: fresh call %d, call reading the workflow's history %d", fresh, whole)
	require.Greater(t, whole, int64(60_000), "the history of 60 operations is at least 60 kB of results")
	require.Less(t, fresh, int64(12_000), "a fresh call reads its own few results, not the history")
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
// DATABASE_URL or a private cluster): SubmitAndWatchFresh, the doors'
// call, reads only what comes after it subscribed; SubmitAndWait reads the
// workflow's results from the stream's start, so it slows down as the
// workflow grows (the history grows by b.N operations during the run).
func BenchmarkSubmitInALongWorkflow(b *testing.B) {
	bd := setup(b)
	for _, fresh := range []bool{true, false} {
		name := map[bool]string{true: "fresh", false: "whole"}[fresh]
		wf, filled, i := "wf_bench_"+name, false, 0
		b.Run(name, func(b *testing.B) { // run again with a larger b.N
			if !filled {
				bd.history(b, wf, 300)
				filled = true
			}
			for b.Loop() {
				i++
				in := capture(wf, fmt.Sprintf("%s:b_%d", wf, i), fmt.Sprintf("%s_b_%d", wf, i), 100)
				var err error
				if fresh {
					_, err = bd.cl.SubmitAndWatchFresh(bd.ctx, in, nil)
				} else {
					_, err = bd.cl.SubmitAndWait(bd.ctx, in)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
