package main

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// benchTool is the tool every bench intent calls: a capture against the
// instant local payments vendor.
const benchTool = "capture_payment"

// benchIntent is intent i of workflow wf. The workflow id starts with the
// run id, and so do the event id and the order id (and so the business key
// payment:<order_id>:capture:…): a run never meets an earlier run's
// operations in the same database.
func benchIntent(wf string, i int) wire.Intent {
	return wire.Intent{EventID: fmt.Sprintf("%s:call_%d", wf, i), WorkflowID: wf, Tool: benchTool,
		Args: benchArgs(orderID(wf, i), i)}
}

// scatteredKeys is -scattered-keys: order ids, and so the idempotency keys
// and entity ids made from them, begin with a hash of the run and the
// intent's number rather than with the run id. Business keys (an order, a
// ticket, an invoice) come in no order, so a real ledger's new keys land all
// over its key indexes, each on a leaf page of its own; the bench's own
// keys, a run's after another's, land next to each other.
var scatteredKeys bool

// orderID is the order of intent i of a phase or preload with prefix.
func orderID(prefix string, i int) string { return orderIDOf(prefix, i, scatteredKeys) }

func orderIDOf(prefix string, i int, scattered bool) string {
	if scattered {
		h := fnv.New32a()
		fmt.Fprintf(h, "%s_%d", prefix, i)
		return fmt.Sprintf("%08x_%s_%d", h.Sum32(), prefix, i)
	}
	return fmt.Sprintf("%s_%d", prefix, i)
}

// benchArgs are the capture's arguments for an order.
func benchArgs(orderID string, i int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"order_id":"%s","customer_id":"cust_%d","amount_cents":%d,"currency":"USD"}`, orderID, i%97, 100+i%5000))
}

// captureBody is the capture's arguments as the adapter sends them
// (canonical JSON: keys sorted).
func captureBody(orderID string, i int) []byte {
	return fmt.Appendf(nil, `{"amount_cents":%d,"currency":"USD","customer_id":"cust_%d","order_id":"%s"}`, 100+i%5000, i%97, orderID)
}

// intentSent is an intent the bench published and when.
type intentSent struct {
	in  wire.Intent
	due time.Time
}

// benchRun publishes n intents of workflow wf, at most concurrency at a
// time, as fast as JetStream takes them, and waits for n completed_success
// results: the closed loop of the throughput run.
func benchRun(ctx context.Context, cl *client.Client, wf string, n, concurrency int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	results, err := cl.Results(ctx, wire.ResultSubject(wf))
	if err != nil {
		return 0, err
	}
	start := time.Now()
	var pubErr atomic.Value
	go func() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, concurrency)
		for i := range n {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if err := cl.Publish(ctx, benchIntent(wf, i), ""); err != nil {
					pubErr.Store(err)
				}
			})
		}
		wg.Wait()
	}()
	done := map[string]bool{}
	for len(done) < n {
		select {
		case r, ok := <-results:
			if !ok {
				return 0, fmt.Errorf("bench: results of %s: the subscription ended", wf)
			}
			if r.Status == string(op.StateCompletedSuccess) {
				done[r.OperationID] = true
			} else if r.Final {
				return 0, fmt.Errorf("bench: operation %s ended %s: %s", r.OperationID, r.Status, r.Reason)
			}
		case <-ctx.Done():
			if e := pubErr.Load(); e != nil {
				return 0, e.(error)
			}
			return 0, fmt.Errorf("bench: %d of %d completed: %w", len(done), n, ctx.Err())
		}
	}
	return time.Since(start), nil
}
