package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// ErrInvalidIntent is returned by Submit and SubmitAndWait, before anything
// is sent, for an intent opledger would reject as malformed: event_id,
// workflow_id or tool missing or malformed, args not a JSON object, a wrong
// spec, or over 1 MiB. The error says which; it also wraps op.ErrInvalid.
// Whether the tool exists and its args fit the tool's schema only the ledger
// knows: it answers those with a rejection.
var ErrInvalidIntent = errors.New("invalid intent")

// Submit checks the intent, publishes it (filling an empty Spec; without
// Nats-Msg-Id, see Publish) and returns the ledger's answer to its event id: the
// decision (new, duplicate_event, duplicate_operation, conflict, rejected),
// the operation and its status at the time of the answer.
//
// The answer is the first result carrying the intent's event_id on the
// workflow's results subject. The consumer exists before the intent is
// published, so the answer cannot be missed. If the event id was published
// before (a resend after a timeout or a restart), the answer is the one
// given to that earlier publish, not a later duplicate_event: the
// duplicate_event answer only repeats what the first said (the same
// operation, or the same refusal) with a fresher status, which
// SubmitAndWait follows anyway. Only when the earlier results have left the
// stream (after an hour by default) is the answer the ledger's
// duplicate_event.
//
// Submit reads only the results published after it subscribed, so a call
// costs the same however many results its workflow has in the stream. It
// reads the workflow's earlier results only when the first result carrying
// the event id is not marked as the ledger's answer to a first publish
// (wire.HeaderAnswer): the answer to a resend, a later result of the
// operation the event id created, or a result from services that do not
// mark answers. It waits for the answer until ctx ends, and returns ctx's
// error, ErrClosed, ErrInvalidIntent, or an error from publishing or
// subscribing.
func (c *Client) Submit(ctx context.Context, in wire.Intent) (Answer, error) {
	w, err := c.submit(ctx, in)
	if err != nil {
		return Answer{}, err
	}
	defer w.close()
	return w.answer()
}

// SubmitAndWait submits the intent as Submit does and waits until the
// operation it maps to is at rest (Result.AtRest), returning that result:
//
//   - a final status: completed_success, completed_noop, failed_permanent,
//     rejected, compensated, cancelled (or any result marked final);
//   - a status a person must act on: awaiting_approval or escalated.
//
// Every other status (pending_dispatch, dispatched, acknowledged,
// unknown_outcome, failed_retryable, …) is waited through. An answer that is
// at rest itself, such as a conflict or a rejection, is returned as it is:
// nothing more will come for it.
//
// It follows the answer's operation id, not the event id: after a
// duplicate_operation answer it waits for the existing operation, whose
// results carry the event id that created it. Of an operation's results, the
// one with the highest version counts, wherever it sits in the stream. If
// the operation belongs to another workflow (a duplicate_operation across
// workflows), its results are published on that workflow's subject: once the
// workflow's own subject holds none of the operation's own results,
// SubmitAndWait reads all of opledger.results.> from shortly before the
// answer's time instead, when NATS permissions allow.
//
// When ctx ends first, it returns the newest result seen (the zero Result if
// no answer came) with an error wrapping ctx's error; when the client closes,
// with one wrapping ErrClosed. Other errors are Submit's.
func (c *Client) SubmitAndWait(ctx context.Context, in wire.Intent) (Result, error) {
	w, err := c.submit(ctx, in)
	if err != nil {
		return Result{}, err
	}
	defer w.close()
	ans, err := w.answer()
	if err != nil {
		return Result{}, err
	}
	return w.follow(ans.Result, nil)
}

// SubmitAndWatch is SubmitAndWait that also calls onResult with the answer
// and then with every newer result of the operation it follows (a higher
// version), in the goroutine of the call, before returning the one at rest:
// a caller reports each transition while it waits (an MCP server's progress
// notifications). onResult must not block for long; it may be nil.
func (c *Client) SubmitAndWatch(ctx context.Context, in wire.Intent, onResult func(Result)) (Result, error) {
	w, err := c.submit(ctx, in)
	if err != nil {
		return Result{}, err
	}
	defer w.close()
	ans, err := w.answer()
	if err != nil {
		return Result{}, err
	}
	if onResult != nil {
		onResult(ans.Result)
	}
	return w.follow(ans.Result, onResult)
}

// checkIntent fills in's Spec, checks it as the ledger will and encodes it.
// Errors wrap ErrInvalidIntent.
func checkIntent(in *wire.Intent) ([]byte, error) {
	if in.Spec == "" {
		in.Spec = wire.SpecIntent
	}
	if strings.TrimLeft(in.EventID, " \t") != in.EventID {
		return nil, fmt.Errorf("client: %w: event_id must not start with white space (headers lose it in transit): %w",
			ErrInvalidIntent, op.ErrInvalid)
	}
	if len(in.Args) > 0 && !json.Valid(in.Args) {
		return nil, fmt.Errorf("client: %w: args must be a JSON object, not invalid JSON: %w", ErrInvalidIntent, op.ErrInvalid)
	}
	data, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("client: encode intent: %w", err)
	}
	if _, err := wire.DecodeIntent("", "", data); err != nil {
		return nil, fmt.Errorf("client: %w: %w", ErrInvalidIntent, err)
	}
	return data, nil
}

// waiter reads the results of one submitted intent.
type waiter struct {
	c       *Client
	user    context.Context // the caller's context
	ctx     context.Context // ends with the caller's context or the client
	cancel  context.CancelFunc
	sub     *subscription
	eventID string

	subject string // the workflow's results subject

	pending uint64 // messages left on the subscription after the last one read
	// fresh is true while the subscription reads only what was stored after
	// it was made; rewind makes it read the workflow's results from the
	// start instead.
	fresh   bool
	widened bool // the subscription reads every workflow's results
	// best holds, per operation, the result with the highest version seen.
	best map[string]Result
	// own marks operations whose own progression (decision new) was seen on
	// the subscription: their results are published where we read.
	own map[string]bool
}

// submit checks in, subscribes to its workflow's results (only those stored
// from then on: the waiter is fresh) and publishes it.
func (c *Client) submit(ctx context.Context, in wire.Intent) (*waiter, error) {
	data, err := checkIntent(&in)
	if err != nil {
		return nil, err
	}
	if c.life.Err() != nil {
		return nil, ErrClosed
	}
	subject := c.ResultSubject(in.WorkflowID)
	sctx, cancel := c.scope(ctx)
	// Whether the scope ended (the caller gave up, the client closed) is
	// read before cancel, which ends it too: an error of its own (a refused
	// publish) must not read as ErrClosed.
	sub, err := c.subscribe(sctx, subject, fromNew)
	if err != nil {
		ended := c.ended(sctx)
		cancel()
		if ended {
			return nil, fmt.Errorf("client: submit %s: %w", wire.Clip(in.EventID), cause(ctx))
		}
		return nil, err
	}
	err = c.publish(sctx, in, data, "")
	if err != nil {
		ended := c.ended(sctx)
		sub.stop()
		cancel()
		if ended {
			return nil, fmt.Errorf("client: submit %s: %w", wire.Clip(in.EventID), cause(ctx))
		}
		return nil, err
	}
	return &waiter{c: c, user: ctx, ctx: sctx, cancel: cancel, sub: sub, eventID: in.EventID, subject: subject,
		fresh: true, best: map[string]Result{}, own: map[string]bool{}}, nil
}

func (w *waiter) close() {
	w.sub.stop()
	w.cancel()
}

// read returns the next message as a result (ok false if it is none) and
// records what it says about its operation.
func (w *waiter) read() (r Result, ok bool, err error) {
	r, ok, w.pending, err = w.sub.next(w.ctx)
	if err != nil {
		if w.c.ended(w.ctx) {
			return Result{}, false, cause(w.user)
		}
		return Result{}, false, fmt.Errorf("client: results: %w", err)
	}
	if ok && r.describesOperation() {
		if b, seen := w.best[r.OperationID]; !seen || r.Version > b.Version {
			w.best[r.OperationID] = r
		}
		if r.DedupeDecision == op.DecisionNew {
			w.own[r.OperationID] = true
		}
	}
	return r, ok, nil
}

// answer returns the first result carrying the event id in the workflow's
// results. A fresh waiter (its subscription reads only what came after it)
// takes the first it reads when that is marked as the ledger's answer to a
// first publish (new, duplicate_operation, rejected); anything else (the
// answer to a resend, a later result of the operation the event id created
// before, or a result of services that do not mark answers) means the
// first one may be earlier in the stream, and firstAnswer looks there.
func (w *waiter) answer() (Answer, error) {
	for {
		r, ok, err := w.read()
		if err != nil {
			return Answer{}, fmt.Errorf("client: answer to %s: %w", wire.Clip(w.eventID), err)
		}
		if !ok || r.EventID != w.eventID {
			continue
		}
		if !w.fresh || (r.answer && r.DedupeDecision != op.DecisionDuplicateEvent && r.DedupeDecision != op.DecisionConflict) {
			return Answer{Result: r}, nil
		}
		return w.firstAnswer(r)
	}
}

// firstAnswer returns the first result carrying the event id in the
// workflow's results, reading them from the start of the stream up to r
// (read on a fresh subscription), marked Earlier when it was in the stream
// before the call subscribed; r itself when none is before it (they left
// the stream). The waiter reads on from there, as one that read the
// workflow's results from the start would.
func (w *waiter) firstAnswer(r Result) (Answer, error) {
	at, start := w.sub.last, w.sub.earlierThan
	if w.rewind() != nil {
		return Answer{Result: r}, nil // the history cannot be read: r is the best there is
	}
	w.sub.earlierThan = start
	for {
		h, ok, err := w.read()
		if err != nil {
			return Answer{}, fmt.Errorf("client: answer to %s: %w", wire.Clip(w.eventID), err)
		}
		if ok && h.EventID == w.eventID {
			return Answer{Result: h}, nil
		}
		if w.sub.last >= at || w.pending == 0 {
			// Past where r was, or at the end: r left the stream meanwhile.
			return Answer{Result: r}, nil
		}
	}
}

// follow reads until the operation ans describes is at rest, and returns its
// newest result.
func (w *waiter) follow(ans Result, onResult func(Result)) (Result, error) {
	if ans.AtRest() || !ans.describesOperation() {
		return ans, nil
	}
	id, cur := ans.OperationID, ans
	for {
		if b := w.best[id]; b.Version > cur.Version {
			cur = b
			if onResult != nil {
				onResult(cur)
			}
		}
		if cur.AtRest() {
			return cur, nil
		}
		if w.pending == 0 && !w.own[id] && !w.widened {
			if w.fresh {
				// The operation's own results may be earlier in the
				// workflow's subject (it was created before this call):
				// read them before reading every workflow's.
				w.deepen(cur)
			} else {
				w.widen(cur)
			}
		}
		if _, _, err := w.read(); err != nil {
			return cur, fmt.Errorf("client: wait for operation %s: %w", id, err)
		}
	}
}

// clockSlack covers the difference between the ledger's clock (a result's
// At) and the NATS server's (stream times) when widening.
const clockSlack = time.Minute

// widen replaces the subscription with one on every workflow's results of
// the tenant,
// starting shortly before cur's time: results newer than cur describe later
// changes, so they were published after it. If that subscription cannot be
// made (no permission, say), the current one stays.
func (w *waiter) widen(cur Result) {
	w.widened = true
	start := time.Now()
	if !cur.At.IsZero() && cur.At.Before(start) {
		start = cur.At
	}
	sub, err := w.c.subscribe(w.ctx, w.c.AllResults(), since(start.Add(-clockSlack)))
	if err != nil {
		return
	}
	w.sub.stop()
	w.sub = sub
}

// deepen rewinds a fresh waiter's subscription to follow an operation
// whose own results may be earlier in the workflow's subject: what the
// call has read is read again, and counts no more than once (the highest
// version wins). The history holds at least the call's own answer, so
// pending is never 0 before the subscription has read it, and the waiter
// widens only once the history proved not to hold the operation's results.
// If the history cannot be read, the waiter widens at once.
func (w *waiter) deepen(cur Result) {
	if w.rewind() != nil {
		w.fresh = false
		w.widen(cur)
		return
	}
	w.pending = w.sub.before
}

// rewind replaces a fresh waiter's subscription with one that reads the
// workflow's results from the start of the stream.
func (w *waiter) rewind() error {
	sub, err := w.c.subscribe(w.ctx, w.subject, fromStart)
	if err != nil {
		return err
	}
	w.sub.stop()
	w.sub, w.fresh = sub, false
	return nil
}
