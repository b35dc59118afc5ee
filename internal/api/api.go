// Package api is opledger's HTTP API, behind bearer tokens that name an
// actor and a role. For operators, the human loop of internal/ops (list,
// show, approve, deny, resolve, cancel, compensate; parked outbox rows and
// their requeue; webhook evidence) over JSON; the CLI (opledger ops) is a
// client of it. For agents, the intent API (intents.go, intentbody.go):
// POST /v1/intents, optionally waiting for the final result, and reads of
// the agent's own operations, with tokens bound to a tenant.
// docs/openapi.yaml describes every route; it is served at
// GET /v1/openapi.yaml.
//
// Every /v1/ route needs "Authorization: Bearer <token>" (the document any
// role's, the metrics role's included; the others a role that may read):
// a token unknown to the tokens file is a 401 (counted, never logged, not
// audited: it names no actor); a role that may not act is a 403 from ops,
// audited like every write. A write refused before it reaches ops (a body
// that cannot be read, a malformed args hash, an impossible id) is audited
// here.
// Bodies are read strictly and bounded; errors are {"error": {"code",
// "message"}}, their status decided by one table (errors.go).
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/docs"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Config configures the API.
type Config struct {
	// Ops is the human loop the API serves (required).
	Ops *ops.Service
	// Tokens authenticate requests. nil answers every authenticated route
	// 503 "no API tokens configured": the API is never open.
	Tokens *Tokens
	// Registerer receives the API's metrics; nil records none.
	Registerer prometheus.Registerer
	// ProbesOpenOnLoopback: see GuardConfig.OpenOnLoopback (Guard().Probe).
	ProbesOpenOnLoopback bool
	// Guard, when set, is the process's authentication, made before the
	// API (so that /metrics and /readyz are guarded from the start); the
	// API then uses it, and Tokens, ProbesOpenOnLoopback and the
	// unauthorized counter are its.
	Guard *Guard
	Log   zerolog.Logger
}

// API is the operators' HTTP API.
type API struct {
	cfg      Config
	guard    *Guard
	requests *prometheus.CounterVec
	refused  *prometheus.CounterVec
}

// Route is one route the API serves; every one needs a token.
type Route struct {
	Method string
	Path   string // a net/http pattern path, e.g. /v1/operations/{id}
}

// Pattern is the route's net/http pattern.
func (r Route) Pattern() string { return r.Method + " " + r.Path }

// routes is every route Mount registers; docs/openapi.yaml describes each
// (a test keeps the two equal).
var routes = []Route{
	// The document: any role, the metrics role included.
	{Method: http.MethodGet, Path: "/v1/openapi.yaml"},
	{Method: http.MethodGet, Path: "/v1/operations"},
	{Method: http.MethodGet, Path: "/v1/operations/{id}"},
	{Method: http.MethodPost, Path: "/v1/operations/{id}/approve"},
	{Method: http.MethodPost, Path: "/v1/operations/{id}/deny"},
	{Method: http.MethodPost, Path: "/v1/operations/{id}/resolve"},
	{Method: http.MethodPost, Path: "/v1/operations/{id}/cancel"},
	{Method: http.MethodPost, Path: "/v1/operations/{id}/compensate"},
	{Method: http.MethodGet, Path: "/v1/webhooks"},
	{Method: http.MethodGet, Path: "/v1/outbox/parked"},
	{Method: http.MethodPost, Path: "/v1/outbox/parked/{id}/requeue"},
}

// Guard is the API's authentication, for the process's other routes
// (/metrics and /readyz: Guard().Probe).
func (a *API) Guard() *Guard { return a.guard }

// Routes returns the routes Mount registers.
func Routes() []Route { return append([]Route(nil), routes...) }

// New returns the API. Its metrics are registered with cfg.Registerer.
func New(cfg Config) (*API, error) {
	if cfg.Ops == nil {
		return nil, errors.New("api: the human loop (Ops) is required")
	}
	guard := cfg.Guard
	if guard == nil {
		var err error
		if guard, err = NewGuard(GuardConfig{Tokens: cfg.Tokens, OpenOnLoopback: cfg.ProbesOpenOnLoopback, Registerer: cfg.Registerer, Log: cfg.Log}); err != nil {
			return nil, err
		}
	}
	a := &API{cfg: cfg, guard: guard,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opledger_api_requests_total", Help: "API requests by route and HTTP status.",
		}, []string{"route", "code"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opledger_api_refused_total",
			Help: "API requests refused after authentication, by stable reason: an error code (forbidden, not_found, conflict, invalid_state, too_large, unavailable, invalid) or a finer cause (invalid_body, invalid_query, unknown_id). Refusals before it are in opledger_api_unauthorized_total.",
		}, []string{"reason"}),
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(a.requests); err != nil {
			return nil, fmt.Errorf("api: metrics: %w", err)
		}
		if err := cfg.Registerer.Register(a.refused); err != nil {
			return nil, fmt.Errorf("api: metrics: %w", err)
		}
	}
	return a, nil
}

// handler serves one authenticated route: it returns the 200 body or an error.
type handler func(r *http.Request, a ops.Actor) (any, error)

// Mount registers every route on mux.
func (a *API) Mount(mux *http.ServeMux) {
	handlers := map[string]handler{
		"GET /v1/operations":                  a.list,
		"GET /v1/operations/{id}":             a.show,
		"POST /v1/operations/{id}/approve":    a.approve,
		"POST /v1/operations/{id}/deny":       a.deny,
		"POST /v1/operations/{id}/resolve":    a.resolve,
		"POST /v1/operations/{id}/cancel":     a.cancel,
		"POST /v1/operations/{id}/compensate": a.compensate,
		"GET /v1/webhooks":                    a.webhooks,
		"GET /v1/outbox/parked":               a.parked,
		"POST /v1/outbox/parked/{id}/requeue": a.requeue,
	}
	for _, rt := range routes {
		if rt.Path == "/v1/openapi.yaml" {
			mux.Handle(rt.Pattern(), a.count(rt.Pattern(), a.guard.Any(http.HandlerFunc(serveOpenAPI))))
			continue
		}
		h, ok := handlers[rt.Pattern()]
		if !ok {
			panic("api: no handler for " + rt.Pattern())
		}
		mux.Handle(rt.Pattern(), a.count(rt.Pattern(), a.serve(h)))
	}
}

// Authenticated wraps a route that is not the API's own (the dev stack's
// vendor statistics) in the API's authentication: any role may call it.
func (a *API) Authenticated(route string, h http.Handler) http.Handler {
	return a.count(route, a.guard.Any(h))
}

// MountDocument registers only the API's OpenAPI document, GET
// /v1/openapi.yaml, for a process that serves no API itself (dispatcher,
// reconciler, compensator): every deployment hands out the document, and
// it says which process serves the routes. Like every route but
// /healthz, it needs a token of any role (guard).
func MountDocument(mux *http.ServeMux, guard *Guard) {
	mux.Handle("GET /v1/openapi.yaml", guard.Any(http.HandlerFunc(serveOpenAPI)))
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(docs.OpenAPI)
}

// serve authenticates the request and runs h.
func (a *API) serve(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		actor, err := a.authenticate(r)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		body, err := h(r, actor)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, a.redact(body))
	})
}

// authenticate returns the actor whose bearer token the request carries.
func (a *API) authenticate(r *http.Request) (ops.Actor, error) { return a.guard.Authenticate(r) }

// redact shows every operation of an answer without the values of its
// sensitive arguments (ops.Service.Redact).
func (a *API) redact(body any) any {
	rd := a.cfg.Ops.Redact
	switch b := body.(type) {
	case ListResponse:
		out := make([]*op.Operation, len(b.Operations))
		for i, o := range b.Operations {
			out[i] = rd(o)
		}
		return ListResponse{Operations: out}
	case *ops.Detail:
		d := *b
		d.Operation = rd(b.Operation)
		return &d
	case WriteResponse:
		b.Operation = rd(b.Operation)
		return b
	case CompensateResponse:
		b.Compensation = rd(b.Compensation)
		return b
	}
	return body
}

// fail writes err as an error body with the status the table gives it.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code, msg := classify(err)
	switch {
	case status == http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="opledger"`)
	case errors.Is(err, errNoTokens):
		// counted as not_configured by the guard
	case status == http.StatusInternalServerError:
		a.cfg.Log.Error().Err(err).Str("method", r.Method).Str("path", r.URL.Path).Msg("api: request failed")
	default:
		if status >= 500 {
			a.cfg.Log.Error().Err(err).Str("method", r.Method).Str("path", r.URL.Path).Msg("api: request failed")
		}
		a.refused.WithLabelValues(refusalReason(err, code)).Inc()
	}
	writeJSON(w, status, ErrorBody{Error: ErrorDetail{Code: code, Message: msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	// Canonical arguments go out byte for byte (only white space added), so
	// that a client can check them against their args_hash.
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// count counts the route's requests by status.
func (a *API) count(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		a.requests.WithLabelValues(route, strconv.Itoa(rec.status)).Inc()
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// ListResponse is GET /v1/operations.
type ListResponse struct {
	Operations []*op.Operation `json:"operations"`
}

// WebhooksResponse is GET /v1/webhooks.
type WebhooksResponse struct {
	Webhooks []*store.Evidence `json:"webhooks"`
}

func (a *API) webhooks(r *http.Request, actor ops.Actor) (any, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("the query string is malformed: %w", op.ErrInvalid)
	}
	f, err := evidenceFilter(q)
	if err != nil {
		return nil, err
	}
	list, err := a.cfg.Ops.Webhooks(r.Context(), actor, f)
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = []*store.Evidence{}
	}
	return WebhooksResponse{Webhooks: list}, nil
}

// WriteResponse is what approve, deny, resolve and cancel return: the
// operation after the write and, for approve and deny, its approval request.
type WriteResponse struct {
	Operation *op.Operation          `json:"operation"`
	Approval  *store.ApprovalRequest `json:"approval,omitempty"`
}

// CompensateResponse is what compensate returns: the compensation, a new
// operation whose compensates_operation_id names the one compensated.
type CompensateResponse struct {
	Compensation *op.Operation `json:"compensation"`
}

func (a *API) list(r *http.Request, actor ops.Actor) (any, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("the query string is malformed: %w", op.ErrInvalid)
	}
	f, err := listFilter(q)
	if err != nil {
		return nil, err
	}
	list, err := a.cfg.Ops.List(r.Context(), actor, f)
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = []*op.Operation{}
	}
	return ListResponse{Operations: list}, nil
}

func (a *API) show(r *http.Request, actor ops.Actor) (any, error) {
	id, err := operationID(r)
	if err != nil {
		return nil, err
	}
	d, err := a.cfg.Ops.Show(r.Context(), actor, id)
	if err != nil {
		return nil, err
	}
	return normalize(d), nil
}

// normalize gives every list of a detail a value, so that none is null.
func normalize(d *ops.Detail) *ops.Detail {
	if d.Events == nil {
		d.Events = []op.EventRecord{}
	}
	if d.Attempts == nil {
		d.Attempts = []*op.Attempt{}
	}
	if d.Audit == nil {
		d.Audit = []store.AuditEntry{}
	}
	if d.Approval != nil && d.Approval.Votes == nil {
		d.Approval.Votes = []store.Vote{}
	}
	if d.Webhooks == nil {
		d.Webhooks = []*store.Evidence{}
	}
	return d
}

var argsHashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (a *API) approve(r *http.Request, actor ops.Actor) (any, error) {
	return a.write(r, actor, "approve", []string{"args_hash", "reason"}, func(ctx context.Context, id string, b map[string]string) (any, error) {
		o, err := a.cfg.Ops.Approve(ctx, actor, id, b["args_hash"], b["reason"])
		if err != nil {
			return nil, err
		}
		return a.withApproval(ctx, actor, o), nil
	})
}

func (a *API) deny(r *http.Request, actor ops.Actor) (any, error) {
	return a.write(r, actor, "deny", []string{"reason"}, func(ctx context.Context, id string, b map[string]string) (any, error) {
		o, err := a.cfg.Ops.Deny(ctx, actor, id, b["reason"])
		if err != nil {
			return nil, err
		}
		return a.withApproval(ctx, actor, o), nil
	})
}

// withApproval adds o's approval request (votes so far, how many are
// required) to a decision's answer; the decision stands if it cannot be read.
func (a *API) withApproval(ctx context.Context, actor ops.Actor, o *op.Operation) WriteResponse {
	res := WriteResponse{Operation: o}
	if d, err := a.cfg.Ops.Show(ctx, actor, o.ID); err == nil && d.Approval != nil {
		res.Approval = normalize(d).Approval
	} else if err != nil {
		a.cfg.Log.Warn().Err(err).Str("operation_id", o.ID).Msg("api: approval not read back after a decision")
	}
	return res
}

func (a *API) resolve(r *http.Request, actor ops.Actor) (any, error) {
	return a.write(r, actor, "resolve", []string{"verdict", "external_object_id", "reason"}, func(ctx context.Context, id string, b map[string]string) (any, error) {
		o, err := a.cfg.Ops.Resolve(ctx, actor, id, ops.Verdict(b["verdict"]), b["external_object_id"], b["reason"])
		if err != nil {
			return nil, err
		}
		return WriteResponse{Operation: o}, nil
	})
}

func (a *API) cancel(r *http.Request, actor ops.Actor) (any, error) {
	return a.write(r, actor, "cancel", []string{"reason"}, func(ctx context.Context, id string, b map[string]string) (any, error) {
		o, err := a.cfg.Ops.Cancel(ctx, actor, id, b["reason"])
		if err != nil {
			return nil, err
		}
		return WriteResponse{Operation: o}, nil
	})
}

func (a *API) compensate(r *http.Request, actor ops.Actor) (any, error) {
	return a.write(r, actor, "compensate", []string{"reason"}, func(ctx context.Context, id string, b map[string]string) (any, error) {
		comp, err := a.cfg.Ops.Compensate(ctx, actor, id, b["reason"])
		if err != nil {
			return nil, err
		}
		return CompensateResponse{Compensation: comp}, nil
	})
}

// write reads a write's body strictly and runs it, logging who did what and
// how it ended (never the token). Role checks, reasons and the audit trail
// are the human loop's.
func (a *API) write(r *http.Request, actor ops.Actor, action string, fields []string,
	do func(ctx context.Context, id string, body map[string]string) (any, error)) (any, error) {
	// The write commits or is refused as a whole, even if the client goes
	// away meanwhile: the answer may be lost, the audit row is not.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
	defer cancel()
	id, body, err := readWrite(r, action, fields)
	if err != nil {
		// Refused before the human loop saw it: audited here, so that every
		// write an authenticated actor sends is on the trail.
		var detail map[string]string
		if id == "" {
			detail = map[string]string{"path_id": wire.Clip(r.PathValue("id"))}
		}
		if aerr := a.cfg.Ops.AuditRefused(ctx, actor, action, id, detail, err); aerr != nil {
			err = errors.Join(err, aerr)
		}
		a.cfg.Log.Warn().Str("error", err.Error()).Str("actor", actor.ID).Str("role", string(actor.Role)).Str("action", action).
			Str("operation_id", id).Msg("api: operator write refused")
		return nil, err
	}
	res, err := do(ctx, id, body)
	status, _, _ := classify(err)
	if err == nil {
		status = http.StatusOK
	}
	ev := a.cfg.Log.Info()
	if err != nil {
		ev = a.cfg.Log.Warn().Str("error", err.Error())
	}
	ev.Str("actor", actor.ID).Str("role", string(actor.Role)).Str("action", action).Str("operation_id", id).
		Int("status", status).Msg("api: operator write")
	return res, err
}

// readWrite reads a write's operation id and body; the id is "" when the
// path names no operation an id can have.
func readWrite(r *http.Request, action string, fields []string) (string, map[string]string, error) {
	id, err := operationID(r)
	if err != nil {
		return "", nil, err
	}
	data, err := readBody(r)
	if err != nil {
		return id, nil, err
	}
	body, err := decodeFields(data, fields...)
	if err != nil {
		return id, nil, err
	}
	if action == "approve" && !argsHashRE.MatchString(body["args_hash"]) {
		return id, nil, fmt.Errorf("args_hash is required: the 64 lowercase hex digits of the arguments you approve, as GET /v1/operations/%s shows them: %w", id, op.ErrInvalid)
	}
	return id, body, nil
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// operationID is the {id} of the path; one that no operation can have is
// not found.
func operationID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !idRE.MatchString(id) {
		return "", withReason(ReasonUnknownID, fmt.Errorf("no operation %q: %w", clip(id), op.ErrNotFound))
	}
	return id, nil
}
