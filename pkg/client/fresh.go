package client

import (
	"context"
	"fmt"

	"github.com/opledger/opledger/pkg/wire"
)

// SubmitAndWatchFresh is SubmitAndWatch whose answer is the ledger's answer
// to this very publish: the first result carrying the event id that was
// published after the call began reading, never one an earlier publish of
// the same event id got. Where SubmitAndWatch, for a resend, returns the
// first publish's answer (right when the bytes are the same), this one
// returns what the ledger made of these bytes: duplicate_event with the
// operation's current status for the same intent, conflict for an event
// id reused with another body. Use it where the caller cannot know that a
// resend carries the same bytes (an HTTP body written by someone else).
//
// It needs the ledger to answer the publish, which it does for every
// readable intent (identical unreadable ones are answered once), so it
// waits for the ledger even when an earlier answer is in the stream.
//
// It reads only the results stored after it subscribed, so a call costs
// the same however many results its workflow already has in the stream,
// and it never reads the earlier ones for its answer. Only when the answer
// is a duplicate of an operation still in progress that this call has not
// seen created does it read the workflow's results from the stream's
// start, and then, if the operation is another workflow's, every
// workflow's, as SubmitAndWait does. Errors are SubmitAndWatch's.
func (c *Client) SubmitAndWatchFresh(ctx context.Context, in wire.Intent, onResult func(Result)) (Result, error) {
	w, err := c.submit(ctx, in)
	if err != nil {
		return Result{}, err
	}
	defer w.close()
	var ans Result
	for {
		r, ok, err := w.read()
		if err != nil {
			return Result{}, fmt.Errorf("client: answer to %s: %w", wire.Clip(w.eventID), err)
		}
		if ok && r.EventID == w.eventID && !r.Earlier {
			ans = r
			break
		}
	}
	if onResult != nil {
		onResult(ans)
	}
	return w.follow(ans, onResult)
}
