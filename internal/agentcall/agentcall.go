// Package agentcall is the submit-and-wait core of opledger's agent-side
// doors (the MCP server, the HTTP intent API of internal/api): it turns an
// agent's tool call into an intent on the same NATS path every agent uses
// (pkg/client), so planner-ingest stays the only writer of operations,
// waits a bounded time for the operation to come to rest while reporting
// each transition, and describes the outcome with a receipt.
//
// # Event ids
//
// An intent's event id names the call, not the action (docs/protocol.md).
// A door builds it from the agent's conversation id and tool-call id, never
// from a transport's request id (MCP's JSON-RPC id changes on every retry):
//
//	<prefix>:<conversation>:<tool_call>
//
// each part percent-encoded outside [A-Za-z0-9_.-], so two different pairs
// never make one id. A retry of the same call (a dropped stream, a new
// request id) is the same event: duplicate_event, nothing runs again. A
// re-planned call with a new tool-call id is a new event whose business key
// equals the first's: duplicate_operation, the same operation.
//
// The HTTP intent API takes the agent's own intent instead, event id
// included (SubmitIntent): there the agent chooses the id as the protocol
// says.
//
// Without a tool-call id the door cannot tell a retry from a deliberate
// repeat, so it collapses them, deriving the id from the business identity:
//
//	<prefix>:<conversation>:auto:<sha256 of tool and canonical args, 32 hex>
//
// A retry with other bytes but the same canonical arguments is the same
// event. Two exceptions keep the ledger's own rules: a tool whose key
// carries {entity_version} gets a fresh id per call (a derived id would
// make every set-back, active → suspended → active, a repeat of the first
// call; the ledger already makes a retry of the entity's last action a
// repeat), and an answer saying the operation failed without effect and may
// be sent again later (retry_later) is followed by one more intent under
// <derived id>:after-v<version>, which reopens it (a retry of that reaches
// the same id). The intent's body is deterministic: canonical arguments,
// sorted correlation, nothing per request.
package agentcall

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// Limits on what an agent's door accepts.
const (
	// MaxCallIDLen bounds a conversation or tool-call id.
	MaxCallIDLen = 128
	// DefaultWait is how long a call waits for its operation to come to rest.
	DefaultWait = 25 * time.Second
	// MaxWait bounds any configured wait.
	MaxWait = 10 * time.Minute
	// answerWait bounds the wait for the ledger's answer once an intent is
	// being published, even when the caller went away meanwhile.
	answerWait = 15 * time.Second
)

// Config configures a Door.
type Config struct {
	// Client publishes intents and reads results as the door's tenant.
	Client *client.Client
	// Tenant is the client's tenant ("" is the default one).
	Tenant string
	// Registry is the door's copy of the tool registry (a catalog will do):
	// it validates and canonicalizes arguments before anything is sent.
	Registry *registry.Registry
	// EventPrefix starts every event id (default "mcp").
	EventPrefix string
	// Actor proposes the calls (default agent "opledger-door"); a Call may
	// name its own actor id.
	Actor wire.Actor
	// Wait bounds how long a call waits for its operation (default
	// DefaultWait, at most MaxWait).
	Wait time.Duration
}

// Door submits agents' calls.
type Door struct{ cfg Config }

// New returns a door. Errors: no client or registry, a bad prefix.
func New(cfg Config) (*Door, error) {
	if cfg.Client == nil || cfg.Registry == nil {
		return nil, fmt.Errorf("agentcall: a client and a registry are required: %w", op.ErrInvalid)
	}
	if cfg.EventPrefix == "" {
		cfg.EventPrefix = "mcp"
	}
	if escape(cfg.EventPrefix) != cfg.EventPrefix || len(cfg.EventPrefix) > 16 {
		return nil, fmt.Errorf("agentcall: event prefix %q: 1-16 of [A-Za-z0-9_.-]: %w", wire.Clip(cfg.EventPrefix), op.ErrInvalid)
	}
	if cfg.Tenant == "" {
		cfg.Tenant = wire.DefaultTenant
	}
	if cfg.Actor.ID == "" {
		cfg.Actor = wire.Actor{Type: "agent", ID: "opledger-door"}
	}
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	cfg.Wait = min(cfg.Wait, MaxWait)
	return &Door{cfg: cfg}, nil
}

// Tenant is the door's tenant.
func (d *Door) Tenant() string { return d.cfg.Tenant }

// Wait is the door's wait bound.
func (d *Door) Wait() time.Duration { return d.cfg.Wait }

// Registry is the door's registry.
func (d *Door) Registry() *registry.Registry { return d.cfg.Registry }

// Call is one tool call an agent made.
type Call struct {
	Tool       string
	Args       json.RawMessage
	WorkflowID string
	RunID      string
	// ConversationID scopes ToolCallID (tool-call ids are unique only
	// within a conversation); "" uses the workflow id.
	ConversationID string
	// ToolCallID is the model's id for the call; "" derives the event id
	// from the business identity (see the package doc).
	ToolCallID string
	// ActorID, when set, proposes the call instead of the door's actor.
	ActorID string
}

// Submitted is what a call came to.
type Submitted struct {
	// Result is the newest result seen: at rest, or the state when the
	// wait ended.
	Result client.Result
	// Answer is the ledger's answer to the call's event (its decision).
	Answer   client.Result
	EventID  string
	ArgsHash string
	// WaitEnded is true when the wait bound passed before the operation
	// came to rest: it goes on without the caller.
	WaitEnded bool
	Waited    time.Duration
}

// ErrNoAnswer: the intent was handed to NATS but the ledger did not answer
// it within 15 s (planner-ingest down or far behind). Whether it was
// stored is not known; sending the same intent again, with the same event
// id, is safe. It wraps op.ErrRetryable.
var ErrNoAnswer = fmt.Errorf("agentcall: the ledger did not answer the intent in time; sending it again with the same event id is safe: %w", op.ErrRetryable)

// InvalidError is a call the door refuses before sending anything: its
// ids or arguments are not acceptable. Reason is fit for the agent.
type InvalidError struct{ Reason string }

func (e *InvalidError) Error() string { return e.Reason }

// Unwrap makes errors.Is(err, op.ErrInvalid) true.
func (e *InvalidError) Unwrap() error { return op.ErrInvalid }

// Prepare checks a call and builds its intent, without sending it.
// Errors: *InvalidError.
func (d *Door) Prepare(c Call) (wire.Intent, *registry.Prepared, error) {
	invalid := func(format string, a ...any) (wire.Intent, *registry.Prepared, error) {
		return wire.Intent{}, nil, &InvalidError{Reason: fmt.Sprintf(format, a...)}
	}
	if !wire.ValidWorkflowID(c.WorkflowID) {
		return invalid("the workflow id is not valid")
	}
	if c.RunID != "" && !wire.ValidID(c.RunID) {
		return invalid("the run id must be 1-%d printable characters", wire.MaxIDLen)
	}
	conv := c.ConversationID
	if conv == "" {
		conv = c.WorkflowID
	}
	if !validCallID(conv) {
		return invalid("the conversation id must be 1-%d bytes of printable text", MaxCallIDLen)
	}
	if c.ToolCallID != "" && !validCallID(c.ToolCallID) {
		return invalid("the tool-call id must be 1-%d bytes of printable text", MaxCallIDLen)
	}
	if c.ActorID != "" && !wire.ValidText(c.ActorID, wire.MaxIDLen) {
		return invalid("the actor id is not printable text")
	}
	tool, err := d.cfg.Registry.Tool(c.Tool)
	if err != nil {
		return invalid("tool %q is not registered", wire.Clip(c.Tool))
	}
	args := c.Args
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	prep, err := tool.Prepare(registry.Proposal{WorkflowID: c.WorkflowID, Tenant: d.cfg.Tenant, RunID: c.RunID, Args: args})
	if err != nil {
		return invalid("%s", wire.Clip200(strings.TrimPrefix(err.Error(), "tool "+tool.Name+": ")))
	}
	var eventID string
	switch {
	case c.ToolCallID != "":
		eventID = d.cfg.EventPrefix + ":" + escape(conv) + ":" + escape(c.ToolCallID)
	case prep.EntityVersion != nil:
		eventID = d.cfg.EventPrefix + ":" + escape(conv) + ":once:" + op.NewID("evt")
	default:
		sum := sha256.Sum256([]byte(tool.Name + "\x00" + string(prep.Args.JSON)))
		eventID = d.cfg.EventPrefix + ":" + escape(conv) + ":auto:" + hex.EncodeToString(sum[:16])
	}
	if len(eventID) > wire.MaxIDLen {
		sum := sha256.Sum256([]byte(eventID))
		eventID = d.cfg.EventPrefix + ":h:" + hex.EncodeToString(sum[:24])
	}
	actor := d.cfg.Actor
	if c.ActorID != "" {
		actor.ID = c.ActorID
	}
	corr := map[string]string{"conversation_id": clipID(conv), "door": d.cfg.EventPrefix}
	if c.ToolCallID != "" {
		corr["tool_call_id"] = clipID(c.ToolCallID)
	}
	in := wire.Intent{Spec: wire.SpecIntent, EventID: eventID, WorkflowID: c.WorkflowID, RunID: c.RunID, Tool: tool.Name,
		Args: json.RawMessage(prep.Args.JSON), Actor: &actor, Correlation: corr}
	return in, prep, nil
}

// Submit sends the call and waits, at most the door's wait, for its
// operation to come to rest, calling onResult (which may be nil) with the
// answer and each newer result. The caller going away (ctx ends) stops the
// wait, never the operation; once publishing started, the door waits for
// the ledger's answer first (at most 15 s), so that what was sent is known.
//
// A wait that ends before the operation is at rest is not an error
// (WaitEnded). Errors: *InvalidError, ctx's error, or the client's.
func (d *Door) Submit(ctx context.Context, c Call, onResult func(client.Result)) (Submitted, error) {
	in, prep, err := d.Prepare(c)
	if err != nil {
		return Submitted{}, err
	}
	start := time.Now()
	out := Submitted{EventID: in.EventID, ArgsHash: prep.Args.Hash}
	res, ans, ended, err := d.submit(ctx, in, d.cfg.Wait, true, onResult)
	if err == nil && c.ToolCallID == "" && prep.EntityVersion == nil && ans.DedupeDecision == op.DecisionDuplicateEvent &&
		ans.RetryRecommendation == op.RecommendRetryLater && ans.Version > 0 {
		// The derived event's operation failed without effect and asks to
		// be sent again later: this call is that, under an id of its own.
		in.EventID = fmt.Sprintf("%s:after-v%d", in.EventID, ans.Version)
		if len(in.EventID) <= wire.MaxIDLen {
			out.EventID = in.EventID
			res, ans, ended, err = d.submit(ctx, in, d.cfg.Wait, true, onResult)
		}
	}
	out.Result, out.Answer, out.WaitEnded, out.Waited = res, ans, ended, time.Since(start)
	return out, err
}

// submit publishes in and follows it for at most wait. The wait runs on a
// context of its own: the caller's cancellation, and the wait bound, end it
// only after the ledger's answer arrived (or answerWait passed without one:
// ErrNoAnswer).
//
// fresh takes as the answer the ledger's answer to this publish
// (client.SubmitAndWatchFresh), not an earlier publish's of the same event.
func (d *Door) submit(ctx context.Context, in wire.Intent, wait time.Duration, fresh bool, onResult func(client.Result)) (res, ans client.Result, ended bool, err error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var mu sync.Mutex
	answered, gone, expired, late := false, false, false, false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		gone = true
		if answered {
			cancel()
		}
	})
	defer stop()
	waitBy := time.AfterFunc(max(wait, 0), func() {
		mu.Lock()
		defer mu.Unlock()
		expired = true
		if answered {
			cancel()
		}
	})
	defer waitBy.Stop()
	answerBy := time.AfterFunc(answerWait, func() {
		mu.Lock()
		defer mu.Unlock()
		if !answered {
			late = true
			cancel()
		}
	})
	defer answerBy.Stop()
	first := true
	watch := d.cfg.Client.SubmitAndWatch
	if fresh {
		watch = d.cfg.Client.SubmitAndWatchFresh
	}
	res, err = watch(wctx, in, func(r client.Result) {
		if first {
			first, ans = false, r
			mu.Lock()
			answered = true
			if gone || expired {
				cancel()
			}
			mu.Unlock()
		}
		if onResult != nil {
			onResult(r)
		}
	})
	if first && err == nil {
		ans = res // the answer was at rest itself
	}
	mu.Lock()
	wasLate, wasExpired := late, expired
	mu.Unlock()
	switch {
	case err == nil:
		return res, ans, false, nil
	case ctx.Err() != nil:
		return res, ans, false, ctx.Err()
	case !first && wasExpired:
		return res, ans, true, nil
	case first && wasLate:
		return res, ans, false, fmt.Errorf("%w: %w", ErrNoAnswer, err)
	}
	return res, ans, false, err
}

// WaitFor follows operation id on the workflow's results, from the start
// of the stream, until done says a result is what the caller waits for,
// the door's wait passes (ended true, the newest result so far) or ctx
// ends. onResult sees each newer result.
func (d *Door) WaitFor(ctx context.Context, workflowID, id string, done func(client.Result) bool, onResult func(client.Result)) (client.Result, bool, error) {
	wctx, cancel := context.WithTimeout(ctx, d.cfg.Wait)
	defer cancel()
	ch, err := d.cfg.Client.Watch(wctx, d.cfg.Client.ResultSubject(workflowID))
	if err != nil {
		return client.Result{}, false, err
	}
	var best client.Result
	for r := range ch {
		if r.OperationID != id || r.DedupeDecision == op.DecisionConflict || r.DedupeDecision == op.DecisionRejected || r.Version <= best.Version {
			continue
		}
		best = r
		if onResult != nil {
			onResult(r)
		}
		if done(r) {
			return r, false, nil
		}
	}
	if ctx.Err() != nil {
		return best, false, ctx.Err()
	}
	return best, true, nil
}

// validCallID reports whether an agent-supplied id may be used: 1 to
// MaxCallIDLen bytes of UTF-8 without control characters.
func validCallID(s string) bool {
	if s == "" || len(s) > MaxCallIDLen || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return false
		}
	}
	return true
}

func clipID(s string) string {
	if len(s) <= wire.MaxCorrelationLen {
		return s
	}
	return wire.Clip200(s)
}

// escape percent-encodes every byte outside [A-Za-z0-9_.-], ':' and '%'
// included, so that joining escaped parts with ':' is unambiguous.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// ConversationEvents is the prefix of every event id of a conversation's
// calls through this door: list_operations' conversation scope.
func (d *Door) ConversationEvents(conversationID string) string {
	return d.cfg.EventPrefix + ":" + escape(conversationID) + ":"
}
