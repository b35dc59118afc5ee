// Package ops is the human loop: what operators and approvers do to
// operations, for the CLI and the HTTP API alike. Approvals (dual control,
// bound to the arguments, single-use, never by the proposer), resolving
// escalations with evidence, cancelling what was not sent, compensating
// what was done. Every write needs a reason, is checked against the
// actor's role, changes the operation in one transaction with its event,
// result and follow-up command, and is audited, refused writes included.
package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/opledger/opledger/internal/compensate"
	"github.com/opledger/opledger/internal/followup"
	"github.com/opledger/opledger/internal/outbox"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// Role is what an actor may do.
type Role string

// Roles, each including the ones before it where it says so.
const (
	// RoleViewer reads operations.
	RoleViewer Role = "viewer"
	// RoleApprover reads, approves and denies.
	RoleApprover Role = "approver"
	// RoleOperator reads, resolves escalations, cancels and compensates.
	RoleOperator Role = "operator"
	// RoleAdmin does everything.
	RoleAdmin Role = "admin"
	// RoleMetrics reads nothing of the ledger: it is for scrapers and
	// probes, which read /metrics and /readyz (as every role may).
	RoleMetrics Role = "metrics"
)

// ValidRole reports whether r is a known role.
func ValidRole(r Role) bool {
	return r == RoleViewer || r == RoleApprover || r == RoleOperator || r == RoleAdmin || r == RoleMetrics
}

// Actor is who asks.
type Actor struct {
	ID   string
	Role Role
	// Tenant and WorkflowPrefix bind an agent (RoleAgent) to the
	// operations it may submit and see; empty for every other role.
	Tenant, WorkflowPrefix string
}

// Errors, classified once by the HTTP API (403, 409, 400, 404).
var (
	// ErrForbidden: the actor's role does not allow the action, or the
	// actor proposed the call they try to approve.
	ErrForbidden = errors.New("forbidden")
	// ErrState: the operation's state does not allow the action (already
	// decided, not escalated, already sent, expired).
	ErrState = errors.New("not possible in the operation's state")
)

// Service is the human loop over a ledger and a registry.
type Service struct {
	st  *store.Store
	reg *registry.Registry
}

// New returns the service.
func New(st *store.Store, reg *registry.Registry) *Service { return &Service{st: st, reg: reg} }

// List returns operations matching f (viewer).
func (s *Service) List(ctx context.Context, a Actor, f store.Filter) ([]*op.Operation, error) {
	if err := allowed(a, RoleViewer); err != nil {
		return nil, err
	}
	return s.st.ListOperations(ctx, f)
}

// Redact returns o as it may be shown: the values of its tool's sensitive
// arguments replaced by "***" and named in RedactedArgs (a copy; o is left
// as it is). Arguments of a tool the registry no longer has, or that cannot
// be read, are not shown at all when any tool has sensitive arguments.
func (s *Service) Redact(o *op.Operation) *op.Operation {
	if o == nil || s.reg == nil {
		return o
	}
	t, err := s.reg.Tool(o.Tool)
	if err != nil {
		if !s.reg.AnySensitive() {
			return o
		}
		out := *o
		out.Args, out.RedactedArgs = json.RawMessage(`{}`), []string{"*"}
		return &out
	}
	args, redacted := t.RedactArgs(o.Args)
	if len(redacted) == 0 && args != nil {
		return o
	}
	out := *o
	out.Args, out.RedactedArgs = args, redacted
	if args == nil {
		out.Args, out.RedactedArgs = json.RawMessage(`{}`), []string{"*"}
	}
	return &out
}

// Detail is an operation with its attempts, history, approval and audit.
type Detail struct {
	Operation *op.Operation          `json:"operation"`
	Events    []op.EventRecord       `json:"events"`
	Attempts  []*op.Attempt          `json:"attempts"`
	Approval  *store.ApprovalRequest `json:"approval,omitempty"`
	Audit     []store.AuditEntry     `json:"audit"`
	// Webhooks is the webhook evidence found to be about the operation:
	// what settled it, confirmed it, or was flagged against it.
	Webhooks []*store.Evidence `json:"webhooks"`
}

// Show returns an operation's detail (viewer). Errors: op.ErrNotFound.
func (s *Service) Show(ctx context.Context, a Actor, id string) (*Detail, error) {
	if err := allowed(a, RoleViewer); err != nil {
		return nil, err
	}
	o, err := s.st.Operation(ctx, id)
	if err != nil {
		return nil, err
	}
	d := &Detail{Operation: o}
	if d.Events, err = s.st.Events(ctx, id); err != nil {
		return nil, err
	}
	if d.Attempts, err = s.st.Attempts(ctx, id); err != nil {
		return nil, err
	}
	if d.Approval, err = s.st.Approval(ctx, id); errors.Is(err, op.ErrNotFound) {
		d.Approval, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	if d.Audit, err = s.st.AuditTrail(ctx, id); err != nil {
		return nil, err
	}
	if d.Webhooks, err = s.st.EvidenceOf(ctx, id); err != nil {
		return nil, err
	}
	return d, nil
}

// Webhooks returns webhook evidence matching f (viewer): by default what
// was flagged (out of band, contradicting, expired), the most recent first.
func (s *Service) Webhooks(ctx context.Context, a Actor, f store.EvidenceFilter) ([]*store.Evidence, error) {
	if err := allowed(a, RoleViewer); err != nil {
		return nil, err
	}
	return s.st.ListEvidence(ctx, f)
}

// Approve records an approver's approval of operation id, bound to the
// arguments hash the approver saw. When the tool's required number of
// distinct approvers is reached, the operation is released for dispatch
// (and the approval request is consumed); until then the vote is recorded
// and the agent told how many are still missing.
//
// Errors: ErrForbidden (role; the proposer approving their own call);
// op.ErrConflict (other arguments than approved, or a second vote by the
// same approver); ErrState (not awaiting approval, or expired); op.ErrInvalid
// (no reason); op.ErrNotFound.
func (s *Service) Approve(ctx context.Context, a Actor, id, argsHash, reason string) (*op.Operation, error) {
	return s.write(ctx, a, RoleApprover, "approve", id, reason, map[string]string{"args_hash": argsHash},
		func(tx *store.Tx, o *op.Operation) (*op.Operation, error) {
			req, err := s.pendingApproval(ctx, tx, o)
			if err != nil {
				return nil, err
			}
			if argsHash != o.ArgsHash || argsHash != req.ArgsHash {
				return nil, fmt.Errorf("the approval is for arguments %s, the operation has %s: %w", short(argsHash), short(o.ArgsHash), op.ErrConflict)
			}
			if o.ProposedBy != "" && a.ID == o.ProposedBy {
				return nil, fmt.Errorf("%s proposed this call and cannot approve it: %w", a.ID, ErrForbidden)
			}
			added, err := tx.AddVote(ctx, o.ID, store.Vote{Approver: a.ID, Decision: "approve", ArgsHash: argsHash, Reason: reason})
			if err != nil {
				return nil, err
			}
			if !added {
				return nil, fmt.Errorf("%s already voted on this operation: %w", a.ID, op.ErrConflict)
			}
			var approvers []string
			for _, v := range req.Votes {
				if v.Decision == "approve" {
					approvers = append(approvers, v.Approver)
				}
			}
			approvers = append(approvers, a.ID)
			if len(approvers) < req.Required {
				why := fmt.Sprintf("approved by %s: %d of %d approvals", strings.Join(approvers, ", "), len(approvers), req.Required)
				return s.transition(ctx, tx, o, a, op.EventVote, why, reason, nil)
			}
			if err := tx.CloseApproval(ctx, o.ID, "approved"); err != nil {
				return nil, err
			}
			why := "approved by " + strings.Join(approvers, ", ")
			return s.transition(ctx, tx, o, a, op.EventApprove, why, reason, dispatch(o))
		})
}

// Deny refuses operation id: it is rejected, nothing is sent, and the agent
// is told. Errors as Approve.
func (s *Service) Deny(ctx context.Context, a Actor, id, reason string) (*op.Operation, error) {
	return s.write(ctx, a, RoleApprover, "deny", id, reason, nil, func(tx *store.Tx, o *op.Operation) (*op.Operation, error) {
		if _, err := s.pendingApproval(ctx, tx, o); err != nil {
			return nil, err
		}
		if _, err := tx.AddVote(ctx, o.ID, store.Vote{Approver: a.ID, Decision: "deny", ArgsHash: o.ArgsHash, Reason: reason}); err != nil {
			return nil, err
		}
		if err := tx.CloseApproval(ctx, o.ID, "denied"); err != nil {
			return nil, err
		}
		cur, err := s.transition(ctx, tx, o, a, op.EventReject, "denied by "+a.ID, reason, nil)
		if err != nil {
			return nil, err
		}
		// A denied compensation hands its original back.
		return cur, followup.WithdrawCompensation(ctx, tx, cur, a.ID, wire.Clip200("denied by "+a.ID+": "+reason))
	})
}

// pendingApproval locks o's approval request and checks it can still be decided.
func (s *Service) pendingApproval(ctx context.Context, tx *store.Tx, o *op.Operation) (*store.ApprovalRequest, error) {
	if o.State != op.StateAwaitingApproval {
		return nil, fmt.Errorf("operation %s is %s, not awaiting approval: %w", o.ID, o.State, ErrState)
	}
	req, err := tx.LockApproval(ctx, o.ID)
	if errors.Is(err, op.ErrNotFound) {
		return nil, fmt.Errorf("operation %s has no approval request: %w", o.ID, ErrState)
	} else if err != nil {
		return nil, err
	}
	if req.Status != "pending" {
		return nil, fmt.Errorf("the approval of %s is %s: %w", o.ID, req.Status, ErrState)
	}
	if req.Expired {
		return nil, fmt.Errorf("the approval of %s expired at %s: %w", o.ID, req.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z"), ErrState)
	}
	return req, nil
}

// Verdict is a person's evidence about an escalated operation.
type Verdict string

// Verdicts.
const (
	// VerdictApplied: the vendor did it (ObjectID says which object).
	VerdictApplied Verdict = "applied"
	// VerdictNotApplied: the vendor did not; send it again under the same key.
	VerdictNotApplied Verdict = "not_applied"
	// VerdictGiveUp: fail it for good (its compensation playbook follows).
	VerdictGiveUp Verdict = "give_up"
)

// Resolve settles an escalated operation with a person's evidence
// (operator): applied → completed_success with the vendor's object id; not
// applied → sent again under the same key, as a new generation with a fresh
// retry budget; give up → failed_permanent, and the compensator runs the
// tool's compensation playbook when it can (the event and the agent's
// result say whether it will).
func (s *Service) Resolve(ctx context.Context, a Actor, id string, v Verdict, objectID, reason string) (*op.Operation, error) {
	detail := map[string]string{"verdict": string(v)}
	if objectID != "" {
		detail["external_object_id"] = objectID
	}
	return s.write(ctx, a, RoleOperator, "resolve", id, reason, detail, func(tx *store.Tx, o *op.Operation) (*op.Operation, error) {
		if o.State != op.StateEscalated {
			return nil, fmt.Errorf("operation %s is %s, not escalated: %w", o.ID, o.State, ErrState)
		}
		switch v {
		case VerdictApplied:
			if objectID == "" || !wire.ValidText(objectID, 255) {
				return nil, fmt.Errorf("applied needs the vendor's object id (at most 255 printable characters): %w", op.ErrInvalid)
			}
			c := s.change(o, a, op.EventSucceed, "resolved by "+a.ID+": applied", reason, nil)
			c.ExternalObjectID = objectID
			cur, err := tx.Transition(ctx, c)
			if err != nil {
				return nil, err
			}
			return cur, followup.CompleteCompensation(ctx, tx, cur)
		case VerdictNotApplied:
			c := s.change(o, a, op.EventRequeue, "resolved by "+a.ID+": not applied; sent again under the same key", reason, dispatch(o))
			c.Reopen = true
			return tx.Transition(ctx, c)
		case VerdictGiveUp:
			// Whether the compensator will run the tool's playbook is said
			// now, in the event and the agent's result: it is rendered first
			// (a capture never charged has no charge to refund).
			why := "resolved by " + a.ID + ": given up"
			var command func(*op.Operation) store.Message
			tp := telemetry.FromTraceID(o.TraceID)
			failed := func(after *op.Operation) store.Message {
				return outbox.Command(wire.KindFailed, after, after.OriginEventID, tp, 0)
			}
			if o.CompensatesID != "" {
				// A compensation given up on: its failed command tells the
				// compensator, which escalates the original.
				command = failed
			} else if ctool, _, _, err := compensate.Playbook(s.reg, o); err == nil {
				why += "; its compensation playbook (" + ctool.Name + ") follows"
				command = failed
			} else if t, terr := s.reg.Tool(o.Tool); terr == nil && t.Compensation != nil {
				why += "; its compensation playbook cannot run: " + err.Error()
			}
			c := s.change(o, a, op.EventFailPermanent, wire.Clip200(why), reason, command)
			c.ErrorCategory, c.Error = compensate.CategoryGivenUp, wire.Clip200("given up by "+a.ID+": "+reason)
			return tx.Transition(ctx, c)
		}
		return nil, fmt.Errorf("verdict must be applied, not_applied or give_up, got %q: %w", wire.Clip(string(v)), op.ErrInvalid)
	})
}

// Cancel withdraws an operation that was not sent (operator): planned,
// awaiting approval, pending dispatch, or between retries.
func (s *Service) Cancel(ctx context.Context, a Actor, id, reason string) (*op.Operation, error) {
	return s.write(ctx, a, RoleOperator, "cancel", id, reason, nil, func(tx *store.Tx, o *op.Operation) (*op.Operation, error) {
		if _, err := op.Transition(o.State, op.EventCancel); err != nil {
			return nil, fmt.Errorf("operation %s is %s: only an operation not yet sent can be cancelled: %w", o.ID, o.State, ErrState)
		}
		if o.State == op.StateAwaitingApproval {
			if err := tx.CloseApproval(ctx, o.ID, "cancelled"); err != nil {
				return nil, err
			}
		}
		cur, err := s.transition(ctx, tx, o, a, op.EventCancel, "cancelled by "+a.ID, reason, nil)
		if err != nil {
			return nil, err
		}
		// A cancelled compensation hands its original back.
		return cur, followup.WithdrawCompensation(ctx, tx, cur, a.ID, wire.Clip200("cancelled by "+a.ID+": "+reason))
	})
}

// Compensate runs the tool's compensation playbook for a completed (or
// failed, or escalated) operation (operator). It returns the compensation,
// a new operation with its own key, linked both ways, subject to its own
// tool's approvals and guards. Asking again returns the same compensation.
func (s *Service) Compensate(ctx context.Context, a Actor, id, reason string) (*op.Operation, error) {
	var comp *op.Operation
	_, err := s.write(ctx, a, RoleOperator, "compensate", id, reason, nil, func(tx *store.Tx, o *op.Operation) (*op.Operation, error) {
		// Asked before: the compensation that stands is the answer, whatever
		// the original's state is by now (compensating, compensated).
		var err error
		if comp, err = compensate.Existing(ctx, tx, id); err != nil || comp != nil {
			return comp, err
		}
		if _, err := op.Transition(o.State, op.EventCompensate); err != nil {
			return nil, fmt.Errorf("operation %s is %s and cannot be compensated: %w", o.ID, o.State, ErrState)
		}
		comp, err = compensate.RequestTx(ctx, tx, s.reg, id, a.ID, reason)
		return comp, err
	})
	return comp, err
}

// AuditRefused records a write refused before it reached the human loop
// (a request the API could not read: a malformed body, an operation id no
// operation can have, a malformed args hash), with the actor who sent it
// and why it was refused. id is "" when the request named no valid
// operation; detail says what it named instead.
func (s *Service) AuditRefused(ctx context.Context, a Actor, action, id string, detail map[string]string, refusal error) error {
	entry := store.AuditEntry{Actor: a.ID, Role: string(a.Role), Action: action, OperationID: id,
		Outcome: wire.Clip200(refusal.Error())}
	if detail != nil {
		entry.Detail = detail
	}
	return s.st.Audit(context.WithoutCancel(ctx), entry)
}

// write runs one operator action: the role check, the reason, the change in
// a transaction with its audit row. A refused action is audited too.
func (s *Service) write(ctx context.Context, a Actor, need Role, action, id, reason string, detail map[string]string,
	fn func(*store.Tx, *op.Operation) (*op.Operation, error)) (*op.Operation, error) {
	entry := store.AuditEntry{Actor: a.ID, Role: string(a.Role), Action: action, OperationID: id, Reason: wire.Clip200(reason), Outcome: "ok"}
	if detail != nil {
		entry.Detail = detail
	}
	err := allowed(a, need)
	if err == nil && (strings.TrimSpace(reason) == "" || !wire.ValidText(reason, 500)) {
		err = fmt.Errorf("a reason is required (1-500 printable characters): %w", op.ErrInvalid)
	}
	var cur *op.Operation
	if err == nil {
		err = s.st.InTx(ctx, func(tx *store.Tx) error {
			o, err := tx.Operation(ctx, id)
			if err != nil {
				return err
			}
			if cur, err = fn(tx, o); err != nil {
				return err
			}
			return tx.Audit(ctx, entry)
		})
	}
	var stale *op.StaleError
	if errors.As(err, &stale) {
		err = fmt.Errorf("operation %s changed meanwhile (now %s); look again: %w", id, stale.GotState, ErrState)
	}
	if err != nil {
		entry.Outcome = wire.Clip200(err.Error())
		if aerr := s.st.Audit(context.WithoutCancel(ctx), entry); aerr != nil {
			return nil, errors.Join(err, aerr)
		}
		return nil, err
	}
	return cur, nil
}

// change is a transition of o by an actor, with the agent's result (and a
// command) written with it.
func (s *Service) change(o *op.Operation, a Actor, ev op.Event, why, reason string, command func(*op.Operation) store.Message) store.Change {
	tp := telemetry.FromTraceID(o.TraceID)
	return store.Change{OperationID: o.ID, From: o.State, LeaseEpoch: o.LeaseEpoch, Events: []op.Event{ev},
		Actor: a.ID, Operation: o, Detail: map[string]string{"actor": a.ID, "role": string(a.Role), "reason": wire.Clip200(reason), "why": why},
		Outbox: func(after *op.Operation) []store.Message {
			var msgs []store.Message
			if command != nil {
				msgs = append(msgs, command(after))
			}
			r := wire.ResultFor(after, after.OriginEventID, op.DecisionNew)
			r.Reason = wire.Clip200(why + ": " + reason)
			return append(msgs, outbox.Result(r, tp))
		}}
}

func (s *Service) transition(ctx context.Context, tx *store.Tx, o *op.Operation, a Actor, ev op.Event, why, reason string,
	command func(*op.Operation) store.Message) (*op.Operation, error) {
	return tx.Transition(ctx, s.change(o, a, ev, why, reason, command))
}

// dispatch is the dispatch command that sends o after it is released.
func dispatch(o *op.Operation) func(*op.Operation) store.Message {
	tp := telemetry.FromTraceID(o.TraceID)
	return func(after *op.Operation) store.Message {
		return outbox.Command(wire.KindDispatch, after, after.OriginEventID, tp, 0)
	}
}

func allowed(a Actor, need Role) error {
	switch {
	case a.ID == "" || !ValidRole(a.Role):
		return fmt.Errorf("an authenticated actor with a role is required: %w", ErrForbidden)
	case a.Role == RoleMetrics:
		return fmt.Errorf("%s is %s, for /metrics and /readyz only: %w", a.ID, a.Role, ErrForbidden)
	case a.Role == RoleAdmin, a.Role == need, need == RoleViewer:
		return nil
	}
	return fmt.Errorf("%s is %s; %s may not do this: %w", a.ID, a.Role, need, ErrForbidden)
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}
