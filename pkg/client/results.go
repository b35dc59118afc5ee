package client

import (
	"context"
	"fmt"

	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Watch streams the results published on subjects matching filter
// (c.ResultSubject(workflowID) for one workflow, c.AllResults() for all of
// the client's tenant), from the start of the RESULTS stream.
//
// Two kinds of result are dropped, as docs/protocol.md advises:
//
//   - a repeat: a message whose Nats-Msg-Id was delivered before (a relay
//     republishing after a crash);
//   - a stale step: a result of an operation's own progression (dedupe
//     decision new) whose version is not higher than the last such result
//     delivered for that operation. Several relays publish, so an older state
//     can arrive after a newer one; equal versions describe the same state.
//
// Answers to later events of an operation (duplicate_event,
// duplicate_operation, conflict) are not subject to the version rule: each is
// the only answer to its event id, so each is delivered (once), even when it
// repeats a state already delivered. The channel delivers each operation's
// progression in increasing version, with such answers interleaved.
//
// To bound memory, the last 65,536 message ids and operations are
// remembered; a repeat or stale step of something older is delivered.
// Messages that are not opledger.result.v1 JSON are skipped.
//
// The channel is closed when ctx ends, when the client is closed, or when the
// subscription cannot go on (the connection closed for good). Watch returns
// an error if the consumer cannot be created (for example, no RESULTS stream
// yet) or the client is closed.
func (c *Client) Watch(ctx context.Context, filter string) (<-chan Result, error) {
	return stream(c, ctx, filter, func(r Result) Result { return r })
}

// Results is Watch with the wire type: it streams the results published on
// subjects matching filter, from the start of the RESULTS stream, with
// repeats and stale steps dropped, and closes the channel when ctx ends or
// the client closes. See Watch for the exact rules.
func (c *Client) Results(ctx context.Context, filter string) (<-chan wire.Result, error) {
	return stream(c, ctx, filter, func(r Result) wire.Result { return r.Result })
}

// resultBuffer is how many results a stream channel holds before the
// goroutine feeding it waits for the reader.
const resultBuffer = 256

func stream[T any](c *Client, ctx context.Context, filter string, conv func(Result) T) (<-chan T, error) {
	if err := c.begin(); err != nil {
		return nil, err
	}
	user := ctx
	ctx, cancel := c.scope(ctx)
	sub, err := c.subscribe(ctx, filter, fromStart)
	if err != nil {
		cancel()
		c.wg.Done()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("client: results for %s: %w", wire.Clip(filter), cause(user))
		}
		return nil, err
	}
	out := make(chan T, resultBuffer)
	go func() {
		defer c.wg.Done()
		defer cancel()
		defer sub.stop()
		defer close(out)
		var f orderFilter
		for {
			r, ok, _, err := sub.next(ctx)
			if err != nil {
				return
			}
			if !ok || !f.keep(r) {
				continue
			}
			select {
			case out <- conv(r):
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// rememberMax is how many message ids and operations an orderFilter keeps.
const rememberMax = 1 << 16

// orderFilter drops repeats and stale steps (see Watch). The zero value is
// ready to use.
type orderFilter struct {
	seen     recent[struct{}] // Nats-Msg-Id of delivered messages
	versions recent[int64]    // operation id → highest version of its progression delivered
}

// keep reports whether r is to be delivered, and remembers it if so.
func (f *orderFilter) keep(r Result) bool {
	if r.MsgID != "" {
		if _, dup := f.seen.get(r.MsgID); dup {
			return false
		}
		f.seen.put(r.MsgID, struct{}{})
	}
	if r.DedupeDecision != op.DecisionNew || !r.describesOperation() {
		return true
	}
	if v, ok := f.versions.get(r.OperationID); ok && r.Version <= v {
		return false
	}
	f.versions.put(r.OperationID, r.Version)
	return true
}

// recent is a map that keeps at most rememberMax keys, forgetting the oldest
// inserted first. The zero value is ready to use.
type recent[V any] struct {
	m    map[string]V
	keys []string // ring of inserted keys
	next int
}

func (r *recent[V]) get(k string) (V, bool) {
	v, ok := r.m[k]
	return v, ok
}

func (r *recent[V]) put(k string, v V) {
	if r.m == nil {
		r.m = make(map[string]V)
	}
	if _, ok := r.m[k]; ok {
		r.m[k] = v
		return
	}
	if len(r.keys) < rememberMax {
		r.keys = append(r.keys, k)
	} else {
		delete(r.m, r.keys[r.next])
		r.keys[r.next] = k
		r.next = (r.next + 1) % rememberMax
	}
	r.m[k] = v
}
