package agentcall

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// PrepareIntent checks an intent the agent wrote itself (the HTTP intent
// API's body) against the door's registry and returns it as it will be
// published: the same event id, workflow and fields, the tool's canonical
// arguments (so that a resend whose JSON differs only in key order, white
// space or the look-alikes canonicalization removes is the same event),
// and the door's actor when it names none. Errors: *InvalidError.
func (d *Door) PrepareIntent(in wire.Intent) (wire.Intent, *registry.Prepared, error) {
	invalid := func(format string, a ...any) (wire.Intent, *registry.Prepared, error) {
		return wire.Intent{}, nil, &InvalidError{Reason: fmt.Sprintf(format, a...)}
	}
	switch {
	case !wire.ValidID(in.EventID) || strings.TrimLeft(in.EventID, " \t") != in.EventID:
		return invalid("event_id must be 1-%d printable characters, not starting with white space", wire.MaxIDLen)
	case !wire.ValidWorkflowID(in.WorkflowID):
		return invalid("the workflow id is not valid")
	case in.RunID != "" && !wire.ValidID(in.RunID):
		return invalid("the run id must be 1-%d printable characters", wire.MaxIDLen)
	}
	tool, err := d.cfg.Registry.Tool(in.Tool)
	if err != nil {
		return invalid("tool %q is not registered", wire.Clip(in.Tool))
	}
	args := in.Args
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	prep, err := tool.Prepare(registry.Proposal{WorkflowID: in.WorkflowID, Tenant: d.cfg.Tenant, RunID: in.RunID, Args: args})
	if err != nil {
		return invalid("%s", wire.Clip200(strings.TrimPrefix(err.Error(), "tool "+tool.Name+": ")))
	}
	in.Spec, in.Tool, in.Args = wire.SpecIntent, tool.Name, json.RawMessage(prep.Args.JSON)
	if in.Actor == nil {
		actor := d.cfg.Actor
		in.Actor = &actor
	}
	in.Tenant = ""
	return in, prep, nil
}

// SubmitIntent sends an intent the agent wrote itself, under its own event
// id, takes the ledger's answer to this very send (a resend with other
// bytes under the same event id is a conflict, never the earlier send's
// answer), and waits at most wait (0: only for the ledger's answer; never longer
// than the door's wait) for its operation to come to rest, calling onResult
// (which may be nil) with the answer and each newer result. As with
// Submit, the caller going away ends the wait once the answer is in, never
// the operation; a wait that ends first is not an error (WaitEnded).
//
// Errors: *InvalidError (nothing was sent), ErrNoAnswer, ctx's error, or
// the client's.
func (d *Door) SubmitIntent(ctx context.Context, in wire.Intent, wait time.Duration, onResult func(client.Result)) (Submitted, error) {
	in, prep, err := d.PrepareIntent(in)
	if err != nil {
		return Submitted{}, err
	}
	start := time.Now()
	out := Submitted{EventID: in.EventID, ArgsHash: prep.Args.Hash}
	// The body is the agent's: a resend may carry other bytes under the
	// same event id, which the ledger answers conflict. So the answer is
	// the ledger's to this publish, not an earlier one's.
	res, ans, ended, err := d.submit(ctx, in, min(max(wait, 0), d.cfg.Wait), true, onResult)
	out.Result, out.Answer, out.WaitEnded, out.Waited = res, ans, ended, time.Since(start)
	return out, err
}
