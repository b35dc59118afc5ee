package registry

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/opledger/opledger/pkg/canon"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Proposal is what a model (or a webhook, or an operator) asks for.
type Proposal struct {
	WorkflowID string
	// Tenant the operation belongs to; its key, entity id and dedupe key
	// are scoped by it ("" or "default": unscoped).
	Tenant  string
	RunID   string
	Intent  string // optional; the tool's intent when empty
	TraceID string
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
	// EntityVersion, when the key template has {entity_version}, completes
	// the key when the intent is accepted; Operation.IdempotencyKey is
	// empty until then.
	EntityVersion *EntityVersioning
	Args          *canon.Args
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
	args, err := t.schema.CanonicalizeIdentity(p.Args, t.identity)
	if err != nil {
		return nil, fmt.Errorf("tool %s: %w", t.Name, t.quietSensitive(err))
	}
	var key string
	var ev *EntityVersioning
	if t.key != nil && t.key.Uses(canon.EntityVersionField) {
		// The key is completed when the intent is accepted, from the
		// entity's version at that moment (see EntityVersioning).
		action, err := t.key.RenderWith(args, t.Version, map[string]string{canon.EntityVersionField: "*"})
		if err != nil {
			return nil, fmt.Errorf("tool %s: idempotency key: %w", t.Name, err)
		}
		ev = &EntityVersioning{Action: action, Key: func(v int64) (string, error) {
			return t.key.RenderWith(args, t.Version, map[string]string{canon.EntityVersionField: strconv.FormatInt(v, 10)})
		}}
	} else if key, err = t.Key(args); err != nil {
		return nil, err
	}
	scope := func(id string) string { return canon.CapKey(wire.TenantScope(p.Tenant, id)) }
	if key != "" {
		key = scope(key)
	}
	if ev != nil {
		keyFor := ev.Key
		ev.Action = scope(ev.Action)
		ev.Key = func(v int64) (string, error) {
			k, err := keyFor(v)
			return scope(k), err
		}
	}
	o := &op.Operation{
		ID: op.NewID("op"), Tenant: cmp.Or(p.Tenant, wire.DefaultTenant), WorkflowID: p.WorkflowID, RunID: p.RunID, Tool: t.Name, ToolVersion: t.Version,
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
		o.EntityID = scope(o.EntityID)
	}
	pr := &Prepared{Operation: o, Initial: op.EventEnqueue, Args: args, EntityVersion: ev}
	if ev != nil {
		ev.EntityType, ev.EntityID = o.EntityType, o.EntityID
	}
	if t.approvalRequired(args) {
		pr.Initial = op.EventRequireApproval
	}
	if t.Dedupe.key != nil {
		if pr.DedupeKey, err = t.Dedupe.key.Render(args, t.Version); err != nil {
			return nil, fmt.Errorf("tool %s: dedupe key: %w", t.Name, err)
		}
		pr.DedupeKey = scope(pr.DedupeKey)
	}
	return pr, nil
}

// EntityVersioning completes a key that depends on its entity's version.
// The ledger keeps, per entity, a version and the last action accepted on
// it (the key with "*" for the version): an intent for the same action as
// the last one gets that action's version (a repeat: the same key); any
// other action moves the version on. So after active → suspended, setting
// the status back to active is a new action, while sending "active" twice
// in a row is one.
type EntityVersioning struct {
	EntityType, EntityID string
	// Action is the key with the version left out.
	Action string
	// Key renders the key for a version.
	Key func(version int64) (string, error)
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

// KeyUsesEntityVersion reports whether the tool's key carries
// {entity_version}: the same arguments after another action on the entity
// are a new action (a set-back), not a repeat.
func (t *Tool) KeyUsesEntityVersion() bool {
	return t.key != nil && t.key.Uses(canon.EntityVersionField)
}
