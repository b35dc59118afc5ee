package mcpserver_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/mcpserver"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
)

// TestApprovals: a call that needs approval asks for it the way the client
// can take it (URL elicitation pointing at the operators' API, a form
// confirmation where the operator allows it, or the link alone), bound to
// the operation and its arguments hash, and the same after a restart.
func TestApprovals(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	big := 2_000_000 // above capture_payment's approval threshold

	t.Run("a client without elicitation gets awaiting_approval and the link", func(t *testing.T) {
		cs := connect(t, e.server(t, "wf_apr", nil), nil)
		res := mustCall(t, cs, "capture_payment", capture("order_apr_1", big), "conv_apr", "call_1")
		require.Equal(t, "awaiting_approval", res.Status)
		require.Equal(t, "await_approval", res.RetryRecommendation)
		require.NotNil(t, res.Approval)
		require.Equal(t, "none", res.Approval.Elicited)
		require.Equal(t, e.apiURL+"/v1/operations/"+res.OperationID, res.Approval.URL)
		require.Equal(t, mcpserver.ElicitationID(res.OperationID, res.Approval.ArgsHash), res.Approval.ElicitationID)
		d, err := e.viewer.Show(ctx, res.OperationID)
		require.NoError(t, err)
		require.Equal(t, d.Operation.ArgsHash, res.Approval.ArgsHash, "bound to the arguments the ledger holds")
		require.Equal(t, "mcp-agent", d.Operation.ProposedBy)
		require.Contains(t, res.Next, "approve")

		// A restart: a new server and a new session; the same call gets the
		// same elicitation, and nothing new in the ledger.
		again := mustCall(t, connect(t, e.server(t, "wf_apr", nil), nil), "capture_payment", capture("order_apr_1", big), "conv_apr", "call_1")
		require.Equal(t, res.OperationID, again.OperationID)
		require.Equal(t, res.Approval.ElicitationID, again.Approval.ElicitationID)
		require.Zero(t, e.captures(captureKey("order_apr_1", big)))
	})

	// input-required results; elicitation/create for older clients. A person
	// approves while the client is answering, or before the client's answer
	// comes back (the link opened at once): either way one capture, and the
	// result and the elicitation's completion say which approval it was.
	cases := []struct {
		version string
		first   bool
	}{{"", false}, {"2025-11-25", false}, {"", true}, {"2025-11-25", true}}
	for i, c := range cases {
		version := c.version
		name := "URL elicitation: a person approves in the API, the call completes " + version
		if c.first {
			name += " (approved before the client answers)"
		}
		t.Run(name, func(t *testing.T) {
			order := fmt.Sprintf("order_apr_2_%d", i)
			var mu sync.Mutex
			var asked *mcp.ElicitParams
			completed := make(chan string, 1)
			opts := &mcp.ClientOptions{
				Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
				ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					mu.Lock()
					asked = req.Params
					mu.Unlock()
					// The person opens the link: an approver, with their own token.
					opID := strings.TrimPrefix(req.Params.URL, e.apiURL+"/v1/operations/")
					approve := func() {
						d, err := e.alice.Show(context.Background(), opID)
						if err == nil {
							_, err = e.alice.Approve(context.Background(), opID, d.Operation.ArgsHash, "checked with the customer")
						}
						if err == nil && c.first {
							err = e.waitState(opID, op.StateCompletedSuccess)
						}
						if err != nil {
							t.Errorf("approve: %v", err)
						}
					}
					if c.first {
						approve()
					} else {
						go approve()
					}
					return &mcp.ElicitResult{Action: "accept"}, nil
				},
				ElicitationCompleteHandler: func(_ context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
					completed <- req.Params.ElicitationID
				},
			}
			cs := connectVersion(t, e.server(t, "wf_apr", nil), opts, version)
			res := mustCall(t, cs, "capture_payment", capture(order, big), "conv_apr", "call_2_"+order)
			require.Equal(t, "completed_success", res.Status, res.Reason)
			mu.Lock()
			require.NotNil(t, asked)
			require.Equal(t, "url", asked.Mode)
			require.Equal(t, e.apiURL+"/v1/operations/"+res.OperationID, asked.URL)
			require.Equal(t, mcpserver.ElicitationID(res.OperationID, res.Approval.ArgsHash), asked.ElicitationID)
			mu.Unlock()
			select {
			case id := <-completed:
				require.Equal(t, asked.ElicitationID, id)
			case <-time.After(5 * time.Second):
				t.Fatal("no notifications/elicitation/complete")
			}
			require.Equal(t, 1, e.captures(captureKey(order, big)))
		})
	}

	t.Run("form confirmation where the operator allows it, recorded as its approver", func(t *testing.T) {
		opts := &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			require.Equal(t, "form", req.Params.Mode)
			require.Contains(t, req.Params.Message, "capture_payment")
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
		}}
		srv := e.server(t, "wf_apr", func(c *mcpserver.Config) { c.FormApprover = e.confirm })
		res := mustCall(t, connect(t, srv, opts), "capture_payment", capture("order_apr_3", big), "conv_apr", "call_3")
		require.Equal(t, "completed_success", res.Status, res.Reason)
		d, err := e.viewer.Show(ctx, res.OperationID)
		require.NoError(t, err)
		require.Len(t, d.Approval.Votes, 1)
		require.Equal(t, "end-user", d.Approval.Votes[0].Approver, "the operator's approver, not the proposing agent")
		require.Equal(t, d.Operation.ArgsHash, d.Approval.Votes[0].ArgsHash)

		// A user who declines leaves the request open; nothing runs.
		no := &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		}}
		res = mustCall(t, connect(t, srv, no), "capture_payment", capture("order_apr_4", big), "conv_apr", "call_4")
		require.Equal(t, "awaiting_approval", res.Status)
		require.Zero(t, e.captures(captureKey("order_apr_4", big)))
	})
}

// TestDroppedStreamAndCancel: the stream of a call in flight drops, and
// the agent retries with a new request id on a new session; a call is
// cancelled after its operation was persisted. One effect each, and the
// cancelled one completes anyway.
func TestDroppedStreamAndCancel(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	srv := e.server(t, "wf_drop", nil)
	url := serveHTTP(t, srv)

	t.Run("dropped stream, then a retry with a new request id", func(t *testing.T) {
		require.NoError(t, e.stack.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultLatency, Delay: time.Second}))
		drop := &dropper{base: http.DefaultTransport}
		drop.armed.Store(true)
		progress := newProgressLog()
		cs := connectHTTP(t, url, &http.Client{Transport: drop}, &mcp.ClientOptions{ProgressNotificationHandler: progress.handler})
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := call(cctx, cs, "capture_payment", capture("order_drop_1", 4900), "conv_drop", "call_1", "drop-1")
		require.Error(t, err, "the stream dropped mid-call")
		require.True(t, drop.dropped.Load())

		retry := connectHTTP(t, url, nil, nil) // the agent reconnects
		r, err := call(cctx, retry, "capture_payment", capture("order_drop_1", 4900), "conv_drop", "call_1", nil)
		require.NoError(t, err)
		res := structured[mcpserver.Result](t, r)
		require.Equal(t, "completed_success", res.Status, res.Reason)
		require.True(t, res.Replayed)
		require.Equal(t, 1, e.captures(captureKey("order_drop_1", 4900)), "one charge")
	})

	t.Run("cancelled after the operation was persisted: the work goes on", func(t *testing.T) {
		require.NoError(t, e.stack.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultLatency, Delay: 1500 * time.Millisecond}))
		progress := newProgressLog()
		cs := connect(t, srv, &mcp.ClientOptions{ProgressNotificationHandler: progress.handler})
		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			_, err := call(cctx, cs, "capture_payment", capture("order_cancel_1", 4900), "conv_drop", "call_2", "cancel-1")
			errc <- err
		}()
		var first string
		select {
		case first = <-progress.ch:
		case <-time.After(10 * time.Second):
			t.Fatal("no progress notification")
		}
		cancel() // notifications/cancelled for the request
		require.Error(t, <-errc)
		opID, _, _ := strings.Cut(first, ":")
		require.True(t, strings.HasPrefix(opID, "op_"), first)
		require.Eventually(t, func() bool {
			o, err := e.stack.Services.Store.Operation(ctx, opID)
			return err == nil && o.State == op.StateCompletedSuccess
		}, 15*time.Second, 50*time.Millisecond, "the cancelled call's operation completes")
		require.Equal(t, 1, e.captures(captureKey("order_cancel_1", 4900)))
	})
}

// dropper cuts the response stream of the first tools/call after its first
// server-sent event, as a proxy or a network that drops the connection would.
type dropper struct {
	base    http.RoundTripper
	armed   atomic.Bool
	dropped atomic.Bool
}

func (d *dropper) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := d.base.RoundTrip(r)
	if err != nil || !bytes.Contains(body, []byte(`"tools/call"`)) || !d.armed.CompareAndSwap(true, false) {
		return resp, err
	}
	resp.Body = &cutBody{rc: resp.Body, d: d}
	return resp, nil
}

type cutBody struct {
	rc   io.ReadCloser
	d    *dropper
	seen []byte
}

func (c *cutBody) Read(p []byte) (int, error) {
	if c.d.dropped.Load() {
		return 0, errors.New("connection reset by the test")
	}
	n, err := c.rc.Read(p)
	c.seen = append(c.seen, p[:n]...)
	if i := bytes.Index(c.seen, []byte("\n\n")); i >= 0 {
		c.d.dropped.Store(true)
		_ = c.rc.Close()
		keep := n - (len(c.seen) - (i + 2))
		return max(keep, 0), nil
	}
	return n, err
}

func (c *cutBody) Close() error { return c.rc.Close() }
