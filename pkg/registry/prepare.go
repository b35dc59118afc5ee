package registry

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/opledger/opledger/pkg/canon"
	"github.com/opledger/opledger/pkg/op"
)

// Proposal is what a model (or a webhook, or an operator) asks for.
type Proposal struct {
	WorkflowID string
	RunID      string
	Intent     string // optional; the tool's intent when empty
	TraceID    string
	// Args is the raw JSON arguments object.
	Args []byte
}

// Prepared is a proposal turned into an operation envelope, plus the policy
// decision the registry makes for it.
type Prepared struct {
	Operation *op.Operation
	// Initial moves the new operation out of planned: op.EventEnqueue, or
	// op.EventRequireApproval when the tool's approval rule says so.
	Initial op.Event
	// DedupeKey is the semantic dedupe window key ("" when the tool has none).
	DedupeKey string
	Args      *canon.Args
}

// Prepare canonicalizes the arguments, derives the idempotency key and entity,
// applies the approval rule and returns the envelope of a new operation (in
// state planned, with a fresh operation id). It does no I/O.
//
// Errors wrap op.ErrInvalid (canon.ErrInvalidArgs for argument problems,
// naming the field).
func (t *Tool) Prepare(p Proposal) (*Prepared, error) {
	if p.WorkflowID == "" {
		return nil, fmt.Errorf("tool %s: workflow id is required: %w", t.Name, op.ErrInvalid)
	}
	args, err := t.schema.Canonicalize(p.Args)
	if err != nil {
		return nil, fmt.Errorf("tool %s: %w", t.Name, err)
	}
	key, err := t.Key(args)
	if err != nil {
		return nil, err
	}
	o := &op.Operation{
		ID: op.NewID("op"), WorkflowID: p.WorkflowID, RunID: p.RunID, Tool: t.Name, ToolVersion: t.Version,
		Intent: t.Intent, EntityType: t.EntityType, Args: args.JSON, ArgsHash: args.Hash, Class: t.Class,
		IdempotencyKey: key, State: op.StatePlanned, TraceID: p.TraceID,
	}
	if p.Intent != "" {
		o.Intent = p.Intent
	}
	if t.entityID != nil {
		if o.EntityID, err = t.entityID.Expand(args); err != nil {
			return nil, fmt.Errorf("tool %s: entity id: %w", t.Name, err)
		}
	}
	pr := &Prepared{Operation: o, Initial: op.EventEnqueue, Args: args}
	if t.approvalRequired(args) {
		pr.Initial = op.EventRequireApproval
	}
	if t.Dedupe.key != nil {
		if pr.DedupeKey, err = t.Dedupe.key.Render(args, t.Version); err != nil {
			return nil, fmt.Errorf("tool %s: dedupe key: %w", t.Name, err)
		}
	}
	return pr, nil
}

// Key derives the idempotency key of canonical args: the tool's template over
// canonical fields plus ":v<version>", or, for a read without a template,
// "<tool>:<args hash>:v<version>".
func (t *Tool) Key(args *canon.Args) (string, error) {
	if t.key == nil {
		return t.Name + ":" + args.Hash + ":v" + strconv.Itoa(t.Version), nil
	}
	key, err := t.key.Render(args, t.Version)
	if err != nil {
		return "", fmt.Errorf("tool %s: idempotency key: %w", t.Name, err)
	}
	return key, nil
}

func (t *Tool) approvalRequired(args *canon.Args) bool {
	switch t.Approval.When {
	case "always":
		return true
	case "above":
		v, ok := args.Field(t.Approval.Field)
		if !ok {
			return true // fail closed: a missing amount must not skip approval
		}
		n, err := strconv.ParseInt(v, 10, 64)
		return err != nil || n > t.Approval.Threshold
	}
	return false
}

// ArgType returns the JSON Schema type of a top-level argument ("" if unknown).
func (t *Tool) ArgType(name string) string {
	var s struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	if json.Unmarshal(t.ArgsSchema, &s) != nil {
		return ""
	}
	typ, _ := s.Properties[name].Type.(string)
	return typ
}
