package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/agentcall"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// The HTTP intent API: agents submit the wire intent of docs/protocol.md
// over HTTP and read their operations, with agent tokens of the same
// tokens file (role agent, bound to a tenant and optionally a workflow
// prefix). An intent goes on the agents' NATS path through an agent-side
// door (internal/agentcall), as the tenant's agent, so planner-ingest
// stays the only writer of operations; reads come from the ledger, scoped
// to the token's tenant and workflows, in the shape every door answers
// with (agentcall.Result), never an operator's view.

// Doors hands the intent API the agent-side door of a tenant: a NATS
// connection as that tenant's agent (internal/app makes them).
type Doors interface {
	Door(ctx context.Context, tenant string) (*agentcall.Door, error)
}

// IntentsConfig configures the intent routes.
type IntentsConfig struct {
	// API is the operators' API whose tokens, error table and request
	// counts the routes share (required).
	API *API
	// Doors submit intents; nil answers POST /v1/intents 503 (reads work).
	Doors Doors
	// Wait bounds ?wait=final (default agentcall.DefaultWait, at most
	// agentcall.MaxWait); the doors must wait at least as long.
	Wait time.Duration
	// Registerer receives opledger_api_intents_total; nil records none.
	Registerer prometheus.Registerer
	Log        zerolog.Logger
}

// Intents serves the intent routes.
type Intents struct {
	cfg     IntentsConfig
	answers *prometheus.CounterVec
	// refusedLog bounds the warnings of refused intents, which any agent
	// can cause at will (opledger_api_refused_total counts every one).
	refusedLog *telemetry.LogLimit
	// failedLog bounds the warnings of intents NATS did not take, apart, so
	// that a flood of refusals cannot keep an outage out of the log.
	failedLog *telemetry.LogLimit
}

// Refusals a process logs line by line, at most, per kind: the rest are
// counted in the line that follows (and in the refusals' metrics).
const (
	refusedLogBurst  = 10
	refusedLogPeriod = time.Second
)

// intentRoutes is every route Intents.Mount registers; docs/openapi.yaml
// describes each (a test keeps them equal).
var intentRoutes = []Route{
	{Method: http.MethodPost, Path: "/v1/intents"},
	{Method: http.MethodGet, Path: "/v1/intents/operations"},
	{Method: http.MethodGet, Path: "/v1/intents/operations/{id}"},
}

// IntentRoutes returns the routes Intents.Mount registers.
func IntentRoutes() []Route { return append([]Route(nil), intentRoutes...) }

// Limits of the intent routes.
const (
	defaultIntentList = 20
	maxIntentList     = 100
)

// errNoDoors: the process serves the intent API without NATS for agents.
var errNoDoors = fmt.Errorf("this process has no NATS connection for agents: intents cannot be submitted here: %w", op.ErrRetryable)

// NewIntents returns the intent routes. Errors: no API.
func NewIntents(cfg IntentsConfig) (*Intents, error) {
	if cfg.API == nil {
		return nil, errors.New("api: the intent routes need the API (IntentsConfig.API)")
	}
	if cfg.Wait <= 0 {
		cfg.Wait = agentcall.DefaultWait
	}
	cfg.Wait = min(cfg.Wait, agentcall.MaxWait)
	in := &Intents{cfg: cfg, answers: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opledger_api_intents_total",
		Help: "Intents submitted over the HTTP intent API that the ledger answered, by its dedupe decision.",
	}, []string{"decision"}), refusedLog: telemetry.NewLogLimit(refusedLogBurst, refusedLogPeriod),
		failedLog: telemetry.NewLogLimit(refusedLogBurst, refusedLogPeriod)}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(in.answers); err != nil {
			return nil, fmt.Errorf("api: metrics: %w", err)
		}
	}
	return in, nil
}

// Mount registers the intent routes on mux.
func (in *Intents) Mount(mux *http.ServeMux) {
	handlers := map[string]func(http.ResponseWriter, *http.Request, ops.Actor){
		"POST /v1/intents":                in.submit,
		"GET /v1/intents/operations":      in.list,
		"GET /v1/intents/operations/{id}": in.get,
	}
	for _, rt := range intentRoutes {
		h, ok := handlers[rt.Pattern()]
		if !ok {
			panic("api: no handler for " + rt.Pattern())
		}
		mux.Handle(rt.Pattern(), in.cfg.API.count(rt.Pattern(), in.serve(h)))
	}
}

// serve authenticates the request as the operators' API does.
func (in *Intents) serve(h func(http.ResponseWriter, *http.Request, ops.Actor)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		actor, err := in.cfg.API.authenticate(r)
		if err != nil {
			in.cfg.API.fail(w, r, err)
			return
		}
		h(w, r, actor)
	})
}

// fail writes err; a refusal with a stable reason says it.
func (in *Intents) fail(w http.ResponseWriter, r *http.Request, err error) {
	reason := IntentBodyReason(err)
	if reason == "" {
		in.cfg.API.fail(w, r, err)
		return
	}
	status, code, msg := classify(err)
	in.cfg.API.refused.WithLabelValues(reason).Inc()
	writeJSON(w, status, ErrorBody{Error: ErrorDetail{Code: code, Message: msg, Reason: reason}})
}

// IntentResult is what the intent routes answer about an operation: the
// normalized result every agent-side door gives (agentcall.Result, the MCP
// server's structuredContent) and where to follow it.
type IntentResult struct {
	*agentcall.Result
	// FollowURL reads the operation later, relative to the API
	// (GET /v1/intents/operations/{id}; add ?wait=final to wait for it).
	FollowURL string `json:"follow_url,omitempty"`
}

// IntentList is GET /v1/intents/operations.
type IntentList struct {
	WorkflowID string         `json:"workflow_id"`
	Operations []IntentResult `json:"operations"`
}

// agentOnly refuses every token but an agent's on the intent routes.
func agentOnly(a ops.Actor) error {
	if a.Role != ops.RoleAgent || a.Tenant == "" {
		return fmt.Errorf("the intent API is for agent tokens (role agent, bound to a tenant); %s is %s: operators read GET /v1/operations: %w",
			a.ID, a.Role, ops.ErrForbidden)
	}
	return nil
}

// intentWait reads the wait query parameter: absent (0), "final" (the
// bound) or a duration such as 10s (at most the bound).
func (in *Intents) intentWait(q url.Values) (time.Duration, error) {
	vs, ok := q["wait"]
	if !ok {
		return 0, nil
	}
	if len(vs) != 1 {
		return 0, invalidQuery("query parameter \"wait\" appears more than once")
	}
	if vs[0] == "final" {
		return in.cfg.Wait, nil
	}
	d, err := time.ParseDuration(vs[0])
	if err != nil || d < 0 {
		return 0, invalidQuery("wait must be final or a duration such as 10s, got %q", wire.Clip(vs[0]))
	}
	return min(d, in.cfg.Wait), nil
}

// query parses the query string, allowing only names.
func query(r *http.Request, names ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, invalidQuery("the query string is malformed")
	}
	for name := range q {
		ok := false
		for _, n := range names {
			ok = ok || n == name
		}
		if !ok {
			return nil, invalidQuery("unknown query parameter %q (the parameters are %v)", wire.Clip(name), names)
		}
	}
	return q, nil
}

// submit is POST /v1/intents.
func (in *Intents) submit(w http.ResponseWriter, r *http.Request, actor ops.Actor) {
	start := time.Now()
	detail := map[string]string{"tenant": actor.Tenant}
	log := in.cfg.Log.With().Str("actor", actor.ID).Str("role", string(actor.Role)).Str("tenant", actor.Tenant).Logger()
	// audit records the write, whatever became of it, even when the caller
	// went away meanwhile.
	audit := func(opID, outcome string) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
		defer cancel()
		if err := in.cfg.API.cfg.Ops.AuditAgent(ctx, actor, "submit_intent", opID, outcome, detail); err != nil {
			log.Error().Err(err).Str("operation_id", opID).Msg("api: intent not audited")
		}
	}
	refuse := func(err error) {
		audit("", err.Error())
		in.refusedLog.Event(log.Warn, "refusals_not_logged_before").Str("error", err.Error()).Msg("api: intent refused")
		in.fail(w, r, err)
	}
	if err := agentOnly(actor); err != nil {
		refuse(err)
		return
	}
	q, err := query(r, "wait")
	if err != nil {
		in.fail(w, r, err)
		return
	}
	wait, err := in.intentWait(q)
	if err != nil {
		in.fail(w, r, err)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxIntentBody)
	data, err := readBody(r)
	if errors.Is(err, errTooLarge) {
		err = withReason(ReasonTooLarge, fmt.Errorf("the body is larger than %d bytes: %w", maxIntentBody, errTooLarge))
	}
	if err != nil {
		in.fail(w, r, err)
		return
	}
	intent, err := DecodeIntentBody(data)
	if err != nil {
		in.fail(w, r, err)
		return
	}
	detail["event_id"], detail["workflow_id"], detail["tool"] = intent.EventID, intent.WorkflowID, wire.Clip(intent.Tool)
	log = log.With().Str("event_id", intent.EventID).Str("workflow_id", intent.WorkflowID).Str("tool", wire.Clip(intent.Tool)).Logger()
	if intent.Actor != nil && (intent.Actor.Type != "agent" || intent.Actor.ID != actor.ID) {
		in.fail(w, r, withReason(ReasonActorMismatch, fmt.Errorf(
			"actor must be left out or be {\"type\":\"agent\",\"id\":%q}: the token's agent proposes the call: %w", actor.ID, op.ErrInvalid)))
		return
	}
	intent.Actor = &wire.Actor{Type: "agent", ID: actor.ID}
	if !actor.Sees(actor.Tenant, intent.WorkflowID) {
		refuse(fmt.Errorf("%s may submit into the workflows starting with %q only: %w", actor.ID, actor.WorkflowPrefix, ops.ErrForbidden))
		return
	}
	if in.cfg.Doors == nil {
		refuse(errNoDoors)
		return
	}
	door, err := in.cfg.Doors.Door(r.Context(), actor.Tenant)
	if err != nil {
		log.Error().Err(err).Msg("api: no door for the tenant")
		refuse(fmt.Errorf("NATS is not reachable for tenant %s; sending the same intent again later is safe: %w", actor.Tenant, op.ErrRetryable))
		return
	}
	sub, err := door.SubmitIntent(r.Context(), *intent, wait, nil)
	var inv *agentcall.InvalidError
	switch {
	case errors.As(err, &inv):
		// Refused before anything was sent: as the ledger would, but
		// without spending the event id.
		res := agentcall.Refused(intent.Tool, intent.WorkflowID, intent.EventID, inv)
		res.Advise("")
		audit("", "rejected: "+inv.Reason)
		in.answers.WithLabelValues(string(op.DecisionRejected)).Inc()
		writeJSON(w, http.StatusUnprocessableEntity, IntentResult{Result: res})
		return
	case errors.Is(err, agentcall.ErrNoAnswer):
		refuse(agentcall.ErrNoAnswer)
		return
	case err != nil && r.Context().Err() != nil:
		// Nobody reads the answer; the operation goes on either way.
		if sub.Answer.EventID != "" {
			detail["decision"] = string(sub.Answer.DedupeDecision)
			audit(sub.Answer.OperationID, "ok (the caller went away while waiting)")
		} else {
			audit("", "the caller went away before the ledger answered; the intent goes on if it was stored")
		}
		log.Info().Str("operation_id", sub.Answer.OperationID).Msg("api: caller went away; the operation goes on")
		return
	case errors.Is(err, client.ErrInvalidIntent):
		refuse(withReason(ReasonInvalidIntent, err))
		return
	case errors.Is(err, client.ErrIntentsFull):
		refuse(withReason(ReasonIntentsFull, fmt.Errorf("opledger is behind: its backlog of intents is full and this one was not stored; send it again later (sending the same intent again is safe): %w", op.ErrRetryable)))
		return
	case err != nil:
		in.failedLog.Event(log.Warn, "failures_not_logged_before").Err(err).Msg("api: intent not submitted")
		refuse(fmt.Errorf("the intent could not be handed to NATS; sending the same intent again is safe: %w", op.ErrRetryable))
		return
	}
	res := agentcall.FromClient(sub.Result, sub.Answer, sub.ArgsHash, verifyText(sub.Result.OperationID))
	res.WaitEnded = sub.WaitEnded
	argsHash := sub.ArgsHash
	if res.OperationID != "" && (actor.WorkflowPrefix != "" || !resting(res)) {
		// The ledger's identity is the tenant's: the call may be an
		// operation of a workflow this token may not see. And a result not
		// at rest may be older than the ledger (the answer to an earlier
		// send of the same event): the operation as it is now is the latest.
		o, err := in.cfg.API.cfg.Ops.AgentOperation(context.WithoutCancel(r.Context()), actor, res.OperationID)
		switch {
		case errors.Is(err, op.ErrNotFound):
			err = fmt.Errorf("the call is the same action (or the same event id) as an operation outside the workflows starting with %q; nothing new was started: %w",
				actor.WorkflowPrefix, ops.ErrForbidden)
			detail["decision"] = res.Decision
			audit(res.OperationID, err.Error())
			in.fail(w, r, err)
			return
		case err != nil:
			log.Warn().Err(err).Str("operation_id", res.OperationID).Msg("api: operation not read back after its answer")
		case o.Version > res.Version && res.Version > 0:
			cur := agentcall.FromOperation(o, verifyText(o.ID))
			cur.Decision, cur.Replayed, cur.EventID = res.Decision, res.Replayed, res.EventID
			cur.WaitEnded = res.WaitEnded && !atRest(o)
			res, argsHash = cur, o.ArgsHash
		}
	}
	detail["decision"], detail["status"] = res.Decision, res.Status
	out := in.present(res, argsHash)
	status := http.StatusOK
	switch {
	case res.Status == string(op.StateRejected) && res.Version == 0:
		// A refusal by the ledger (rejected, conflict, or a resend of a
		// refused event): nothing was created by this intent.
		status = http.StatusUnprocessableEntity
		audit(res.OperationID, res.Decision+": "+res.Reason)
	case !resting(res):
		status = http.StatusAccepted
		res.WaitEnded = true
		w.Header().Set("Location", out.FollowURL)
		audit(res.OperationID, "ok")
	default:
		audit(res.OperationID, "ok")
	}
	in.answers.WithLabelValues(res.Decision).Inc()
	log.Info().Str("operation_id", res.OperationID).Str("dedupe_decision", res.Decision).Str("status", res.Status).
		Bool("wait_ended", res.WaitEnded).Dur("latency_ms", time.Since(start)).Int("http_status", status).Msg("api: intent answered")
	writeJSON(w, status, out)
}

// present adds what the intent routes say besides the result: where a
// person approves, how to follow, what to do now.
func (in *Intents) present(res *agentcall.Result, argsHash string) IntentResult {
	out := IntentResult{Result: res}
	follow := "send the same intent again (same event_id)"
	if res.OperationID != "" {
		out.FollowURL = "/v1/intents/operations/" + res.OperationID
		follow = "GET " + out.FollowURL + "?wait=final"
		if op.State(res.Status) == op.StateAwaitingApproval {
			res.Approval = &agentcall.Approval{URL: "/v1/operations/" + res.OperationID, ElicitationID: agentcall.ApprovalID(res.OperationID, argsHash),
				ArgsHash: argsHash, Elicited: "none"}
		}
	}
	res.Advise(follow)
	return out
}

func verifyText(opID string) string {
	if opID == "" {
		return ""
	}
	return "opledger ops show " + opID + " (or GET /v1/operations/" + opID + " with an operator's token)"
}

// resting reports whether a result says its operation is at rest.
func resting(res *agentcall.Result) bool {
	return res.Final || client.Status(res.Status).NeedsPerson()
}

// atRest reports whether an operation will not move without a person or a
// new call.
func atRest(o *op.Operation) bool {
	return o.State.Terminal() || client.Status(o.State).NeedsPerson()
}

// get is GET /v1/intents/operations/{id}.
func (in *Intents) get(w http.ResponseWriter, r *http.Request, actor ops.Actor) {
	if err := agentOnly(actor); err != nil {
		in.fail(w, r, err)
		return
	}
	id, err := operationID(r)
	if err != nil {
		in.fail(w, r, err)
		return
	}
	q, err := query(r, "wait")
	if err != nil {
		in.fail(w, r, err)
		return
	}
	wait, err := in.intentWait(q)
	if err != nil {
		in.fail(w, r, err)
		return
	}
	o, err := in.cfg.API.cfg.Ops.AgentOperation(r.Context(), actor, id)
	if err != nil {
		in.fail(w, r, err)
		return
	}
	ended := false
	if wait > 0 && !atRest(o) {
		ended = true
		if o, err = in.await(r.Context(), actor, o, wait); err != nil {
			in.fail(w, r, err)
			return
		}
		ended = !atRest(o)
	}
	res := agentcall.FromOperation(o, verifyText(o.ID))
	res.WaitEnded = ended
	writeJSON(w, http.StatusOK, in.present(res, o.ArgsHash))
}

// await waits at most wait for o to come to rest, following its results
// as the tenant's agent, and reads it again from the ledger. Without a
// door it only reads it again.
func (in *Intents) await(ctx context.Context, actor ops.Actor, o *op.Operation, wait time.Duration) (*op.Operation, error) {
	if in.cfg.Doors != nil {
		if door, err := in.cfg.Doors.Door(ctx, actor.Tenant); err == nil {
			wctx, cancel := context.WithTimeout(ctx, wait)
			// From the start of the stream: a newer result at rest, published
			// before the wait began, ends it at once.
			newer := func(r client.Result) bool { return r.Version > o.Version && r.AtRest() }
			_, _, _ = door.WaitFor(wctx, o.WorkflowID, o.ID, newer, nil)
			cancel()
		} else {
			in.cfg.Log.Warn().Err(err).Str("tenant", actor.Tenant).Msg("api: cannot wait for an operation: no door for the tenant")
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return in.cfg.API.cfg.Ops.AgentOperation(ctx, actor, o.ID)
}

// list is GET /v1/intents/operations?workflow_id=.
func (in *Intents) list(w http.ResponseWriter, r *http.Request, actor ops.Actor) {
	if err := agentOnly(actor); err != nil {
		in.fail(w, r, err)
		return
	}
	q, err := query(r, "workflow_id", "state", "limit")
	if err != nil {
		in.fail(w, r, err)
		return
	}
	for name, vs := range q {
		if len(vs) != 1 {
			in.fail(w, r, invalidQuery("query parameter %q appears more than once", name))
			return
		}
	}
	workflow := q.Get("workflow_id")
	if !wire.ValidWorkflowID(workflow) {
		in.fail(w, r, invalidQuery("workflow_id is required: the workflow whose operations to list"))
		return
	}
	state := op.State(q.Get("state"))
	if state != "" && !state.Valid() {
		in.fail(w, r, invalidQuery("state %q is not a state", wire.Clip(string(state))))
		return
	}
	limit := defaultIntentList
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > maxIntentList {
			in.fail(w, r, invalidQuery("limit must be an integer from 1 to %d, got %q", maxIntentList, wire.Clip(v)))
			return
		}
	}
	list, err := in.cfg.API.cfg.Ops.AgentList(r.Context(), actor, workflow, state, limit)
	if err != nil {
		in.fail(w, r, err)
		return
	}
	out := IntentList{WorkflowID: workflow, Operations: []IntentResult{}}
	for _, o := range list {
		out.Operations = append(out.Operations, in.present(agentcall.FromOperation(o, verifyText(o.ID)), o.ArgsHash))
	}
	writeJSON(w, http.StatusOK, out)
}
