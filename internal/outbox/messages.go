package outbox

import (
	"encoding/json"
	"maps"
	"time"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Command is the outbox row of a command of kind for o in its current state
// and lease epoch, due delay after it commits (on the database's clock).
// eventID is the inbound event that created o, carried through so results
// can name it. Its subject names the operation: the OPS stream keeps one
// message per subject, so a newer command for the operation replaces an
// older one still waiting and a re-drive never multiplies commands.
func Command(kind string, o *op.Operation, eventID string, tp telemetry.Traceparent, delay time.Duration) store.Message {
	cmd := wire.Command{
		Spec: wire.SpecCommand, Kind: kind, OperationID: o.ID, Tool: o.Tool, IdempotencyKey: o.IdempotencyKey,
		LeaseEpoch: o.LeaseEpoch, WorkflowID: o.WorkflowID, EventID: eventID, State: o.State,
	}
	data, _ := json.Marshal(cmd) // plain struct: cannot fail
	return store.Message{
		Subject: wire.OpsSubject(kind, o.Tool, o.ID), MsgID: op.NewID("msg"), Payload: data,
		OperationID: o.ID, Delay: delay, Header: tp.Header(),
	}
}

// Result is the outbox row that carries r to the agent on its workflow's
// results subject.
func Result(r wire.Result, tp telemetry.Traceparent) store.Message {
	return ResultOn(wire.TenantResultSubject(r.Tenant, r.WorkflowID), r, tp)
}

// ResultOn is Result on another subject (wire.UnroutableSubject).
func ResultOn(subject string, r wire.Result, tp telemetry.Traceparent) store.Message {
	data, _ := json.Marshal(r) // plain struct: cannot fail
	return store.Message{
		Subject: subject, MsgID: op.NewID("msg"), Payload: data,
		OperationID: r.OperationID, Header: tp.Header(),
	}
}

// Answer is Result for the ledger's answer to an intent: it carries
// wire.HeaderAnswer besides the trace context.
func Answer(r wire.Result, tp telemetry.Traceparent) store.Message {
	return marked(Result(r, tp))
}

// AnswerOn is Answer on another subject (wire.UnroutableSubject, or the
// subject of an intent that could not be stored).
func AnswerOn(subject string, r wire.Result, tp telemetry.Traceparent) store.Message {
	return marked(ResultOn(subject, r, tp))
}

func marked(m store.Message) store.Message {
	h := make(map[string]string, len(m.Header)+1)
	maps.Copy(h, m.Header)
	h[wire.HeaderAnswer] = "1"
	m.Header = h
	return m
}
