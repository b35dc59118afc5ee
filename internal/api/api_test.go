package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/examples"
	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/regedit"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// actors of the tests, with their roles. agent-7 is also the agent that
// proposes the calls: an approver who proposed a call cannot approve it.
var actors = map[string]ops.Role{
	"alice": ops.RoleApprover, "bob": ops.RoleApprover, "carol": ops.RoleApprover, "agent-7": ops.RoleApprover,
	"oscar": ops.RoleOperator, "vera": ops.RoleViewer, "root": ops.RoleAdmin,
}

// secretEnv is the environment variable holding the payments vendor's API
// key in the test registry; its value is made per test.
const secretEnv = "OPLEDGER_TEST_PAYMENTS_KEY"

type bundle struct {
	ctx    context.Context
	d      *app.Stack
	spec   *spec
	url    string
	tok    map[string]string // actor → token
	secret string
	agent  *client.Client
}

// testRegistry is the example registry with the settings these tests need:
// capture_payment under dual control (two approvers) and sending the
// payments vendor a secret header; create_ticket giving up on its lookups
// after the first, so that a ticket whose outcome is unknown while the
// vendor's lookup fails goes to a person at once.
func testRegistry(t *testing.T) []byte {
	t.Helper()
	only := func(name string) func(regedit.Tool) bool {
		return func(tl regedit.Tool) bool { return tl.Name == name }
	}
	data, err := regedit.Set(examples.Registry, "approval.approvals_required", "2", only("capture_payment"))
	require.NoError(t, err)
	data, err = regedit.Set(data, "adapter.secret_headers.Authorization", "Bearer ${"+secretEnv+"}", only("capture_payment"))
	require.NoError(t, err)
	data, err = regedit.Set(data, "reconcile.max_lookups", "1", only("create_ticket"))
	require.NoError(t, err)
	return data
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{tok: map[string]string{}, spec: loadSpec(t)}
	var entries []api.TokenEntry
	for actor, role := range actors {
		token, e, err := api.GenerateToken(actor, role)
		require.NoError(t, err)
		b.tok[actor] = token
		entries = append(entries, e)
	}
	tokens, err := api.NewTokens(entries)
	require.NoError(t, err)
	secret, _, err := api.GenerateToken("vendor", ops.RoleViewer) // just 256 random bits
	require.NoError(t, err)
	b.secret = strings.TrimPrefix(secret, api.TokenPrefix)
	lookup := func(k string) (string, bool) {
		if k == secretEnv {
			return b.secret, true
		}
		return "", false
	}
	b.d, err = app.StartStack(context.Background(), app.StackConfig{
		Infra:     app.InfraConfig{DatabaseURL: testdb.New(t), MemoryStreams: true},
		Registry:  app.RegistryConfig{YAML: testRegistry(t), LookupEnv: lookup},
		HTTPAddr:  "127.0.0.1:0",
		APITokens: tokens,
		Services: app.ServicesConfig{Relays: 1,
			Reconcile: reconcile.Config{SettleDelay: 300 * time.Millisecond},
			Maintain:  maintain.Config{SweepInterval: 200 * time.Millisecond, ElectInterval: 100 * time.Millisecond}},
	})
	require.NoError(t, err)
	t.Cleanup(b.d.Close)
	b.url = b.d.HTTP.URL()
	b.agent, err = client.Connect(b.d.Infra.NATSURL, "api-test-agent")
	require.NoError(t, err)
	t.Cleanup(b.agent.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	b.ctx = ctx
	return b
}

// propose publishes a call as agent-7 and waits until it is at rest
// (completed, failed, awaiting approval, escalated).
func (b *bundle) propose(t *testing.T, eventID, tool, args string) client.Result {
	t.Helper()
	res, err := b.agent.SubmitAndWait(b.ctx, wire.Intent{EventID: eventID, WorkflowID: "wf_ops", Tool: tool,
		Args: json.RawMessage(args), Actor: &wire.Actor{Type: "agent", ID: "agent-7"}})
	require.NoError(t, err)
	require.NotEmpty(t, res.OperationID, res.Reason)
	return res
}

// bigCapture proposes a capture above the approval threshold.
func (b *bundle) bigCapture(t *testing.T, order string) string {
	t.Helper()
	res := b.propose(t, "conv_ops:"+order, "capture_payment",
		fmt.Sprintf(`{"order_id":%q,"customer_id":"cust_<1>&co","amount_cents":2000000,"currency":"USD"}`, order))
	require.Equal(t, string(op.StateAwaitingApproval), string(res.Status))
	return res.OperationID
}

// call sends one request as actor ("" sends no token) to the route
// (a pattern path, {id} filled with id), checks the answer against the
// OpenAPI document and returns its status and body.
func (b *bundle) call(t *testing.T, actor, method, route, id string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	default:
		data, err := json.Marshal(v)
		require.NoError(t, err)
		rd = bytes.NewReader(data)
	}
	path := strings.ReplaceAll(route, "{id}", id)
	req, err := http.NewRequestWithContext(b.ctx, method, b.url+path, rd)
	require.NoError(t, err)
	if actor != "" {
		tok, ok := b.tok[actor]
		if !ok {
			tok = actor // an unknown token, as given
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	data := readAll(t, resp)
	specPath, _, _ := strings.Cut(route, "?")
	b.spec.check(t, method, specPath, resp.StatusCode, resp.Header.Get("Content-Type"), data)
	return resp.StatusCode, data
}

// must is call expecting status, decoding the answer into out.
func (b *bundle) must(t *testing.T, status int, out any, actor, method, route, id string, body any) {
	t.Helper()
	got, data := b.call(t, actor, method, route, id, body)
	require.Equal(t, status, got, "%s %s as %s: %s", method, route, actor, data)
	if out != nil {
		require.NoError(t, json.Unmarshal(data, out))
	}
}

// refused is call expecting an error answer with status and code.
func (b *bundle) refused(t *testing.T, status int, code, actor, method, route, id string, body any) string {
	t.Helper()
	var e api.ErrorBody
	b.must(t, status, &e, actor, method, route, id, body)
	require.Equal(t, code, e.Error.Code, e.Error.Message)
	return e.Error.Message
}

func (b *bundle) show(t *testing.T, actor, id string) *ops.Detail {
	t.Helper()
	var d ops.Detail
	b.must(t, http.StatusOK, &d, actor, "GET", "/v1/operations/{id}", id, nil)
	return &d
}

// waitState waits until the operation is in state, as the API shows it.
func (b *bundle) waitState(t *testing.T, id string, state op.State) *ops.Detail {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d := b.show(t, "vera", id)
		if d.Operation.State == state {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("operation %s is %s, never became %s", id, d.Operation.State, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// auditOutcomes is actor → outcomes of their writes on an operation.
func auditOutcomes(d *ops.Detail) map[string][]string {
	out := map[string][]string{}
	for _, a := range d.Audit {
		out[a.Actor+" "+a.Action] = append(out[a.Actor+" "+a.Action], a.Outcome)
	}
	return out
}

type reasonBody struct {
	Reason string `json:"reason"`
}

type approveBody struct {
	ArgsHash string `json:"args_hash"`
	Reason   string `json:"reason"`
}

// Dual control over the API: the proposer, a viewer and a wrong hash are
// refused, each refusal audited; two distinct approvers release the
// operation, which then runs once; the consumed approval cannot be
// replayed.
func TestApproveDualControl(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.bigCapture(t, "order_dual")
	const approve = "/v1/operations/{id}/approve"

	d := b.show(t, "alice", id)
	hash := d.Operation.ArgsHash
	// What the approver is shown is what the hash covers: the canonical
	// arguments, byte for byte once the indentation is taken out.
	var compact bytes.Buffer
	require.NoError(t, json.Compact(&compact, d.Operation.Args))
	require.Contains(t, compact.String(), `"customer_id":"cust_<1>&co"`)
	require.Equal(t, hash, fmt.Sprintf("%x", sha256.Sum256(compact.Bytes())))
	require.Equal(t, "agent-7", d.Operation.ProposedBy)
	require.NotNil(t, d.Approval)
	require.Equal(t, 2, d.Approval.Required)
	require.Equal(t, "pending", d.Approval.Status)
	require.Equal(t, []op.Event{op.EventCreate, op.EventRequireApproval}, events(d))

	msg := b.refused(t, 403, api.CodeForbidden, "agent-7", "POST", approve, id, approveBody{hash, "my own call looks fine"})
	require.Contains(t, msg, "proposed this call")
	b.refused(t, 403, api.CodeForbidden, "vera", "POST", approve, id, approveBody{hash, "viewers do not approve"})
	b.refused(t, 403, api.CodeForbidden, "oscar", "POST", approve, id, approveBody{hash, "operators do not approve"})
	other := strings.Repeat("0", 64)
	msg = b.refused(t, 409, api.CodeConflict, "alice", "POST", approve, id, approveBody{other, "approving other arguments"})
	require.Contains(t, msg, "the approval is for arguments")
	b.refused(t, 400, api.CodeInvalid, "alice", "POST", approve, id, approveBody{"", "no hash"})
	b.refused(t, 400, api.CodeInvalid, "alice", "POST", approve, id, approveBody{hash, ""})

	var w api.WriteResponse
	b.must(t, 200, &w, "alice", "POST", approve, id, approveBody{hash, "customer confirmed the order by phone"})
	require.Equal(t, op.StateAwaitingApproval, w.Operation.State, "one of two approvals")
	require.NotNil(t, w.Approval)
	require.Len(t, w.Approval.Votes, 1)
	b.refused(t, 409, api.CodeConflict, "alice", "POST", approve, id, approveBody{hash, "again, to make two"})

	b.must(t, 200, &w, "bob", "POST", approve, id, approveBody{hash, "second pair of eyes"})
	require.Equal(t, op.StatePendingDispatch, w.Operation.State)
	require.Equal(t, "approved", w.Approval.Status)
	// Replayed after it was consumed: the operation moved on.
	b.refused(t, 409, api.CodeState, "bob", "POST", approve, id, approveBody{hash, "second pair of eyes"})
	b.refused(t, 409, api.CodeState, "carol", "POST", approve, id, approveBody{hash, "a third, too late"})

	d = b.waitState(t, id, op.StateCompletedSuccess)
	require.Equal(t, 1, b.d.Vendors.Stats().Captures, "released once, captured once")
	require.Equal(t, []op.Event{op.EventCreate, op.EventRequireApproval, op.EventVote, op.EventApprove, op.EventDispatch, op.EventSucceed}, events(d))
	require.Equal(t, "alice", d.Events[2].Actor)
	require.Equal(t, "bob", d.Events[3].Actor)
	require.Len(t, d.Attempts, 1)

	// Every write is audited, the refused ones too.
	audit := auditOutcomes(d)
	require.Len(t, audit["agent-7 approve"], 1)
	require.Contains(t, audit["agent-7 approve"][0], "proposed this call")
	require.Contains(t, audit["vera approve"][0], "forbidden")
	require.Contains(t, audit["oscar approve"][0], "forbidden")
	require.Equal(t, "ok", audit["alice approve"][len(audit["alice approve"])-2], "alice's vote, between her refused ones")
	require.Equal(t, []string{"ok"}, audit["bob approve"][:1])
	require.Len(t, audit["bob approve"], 2)
	require.Len(t, audit["carol approve"], 1)
	for _, a := range d.Audit {
		require.NotContains(t, a.Outcome+a.Reason, b.tok[a.Actor], "no token in the audit trail")
	}

	// The agent asking again learns it completed.
	res := b.propose(t, "conv_ops:order_dual:again", "capture_payment", `{"order_id":"order_dual","customer_id":"cust_<1>&co","amount_cents":2000000,"currency":"USD"}`)
	require.Equal(t, op.DecisionDuplicateOperation, res.DedupeDecision)
	require.Equal(t, string(op.StateCompletedSuccess), string(res.Status))
}

func events(d *ops.Detail) []op.Event {
	var out []op.Event
	for _, e := range d.Events {
		out = append(out, e.Event)
	}
	return out
}

// Authentication comes first: no token, a malformed header and an unknown
// token are 401 and counted (the token never in the metrics), a viewer
// reads but cannot write, and bodies are read strictly and bounded.
func TestAuthenticationRolesAndStrictBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.bigCapture(t, "order_auth")

	b.refused(t, 401, api.CodeUnauthenticated, "", "GET", "/v1/operations", "", nil)
	bogus, _, err := api.GenerateToken("nobody", ops.RoleAdmin) // well-formed, never configured
	require.NoError(t, err)
	b.refused(t, 401, api.CodeUnauthenticated, bogus, "GET", "/v1/operations/{id}", id, nil)
	b.refused(t, 401, api.CodeUnauthenticated, bogus, "POST", "/v1/operations/{id}/cancel", id, reasonBody{"x"})
	for _, h := range []string{"Basic " + b.tok["root"], "Bearer", "Bearer  " + b.tok["root"], b.tok["root"]} {
		req, err := http.NewRequest("GET", b.url+"/v1/operations", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", h)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		data := readAll(t, resp)
		require.Equal(t, 401, resp.StatusCode, "%q: %s", h[:5], data)
		require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
	}
	// The scheme is case-insensitive.
	req, err := http.NewRequest("GET", b.url+"/v1/operations", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "bearer "+b.tok["vera"])
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	readAll(t, resp)
	require.Equal(t, 200, resp.StatusCode)

	// The dev stack's vendor statistics need a token too.
	b.refused(t, 401, api.CodeUnauthenticated, "", "GET", "/v1/vendors/stats", "", nil)
	b.must(t, 200, nil, "vera", "GET", "/v1/vendors/stats", "", nil)

	// A viewer reads, and every write is refused and audited.
	var list api.ListResponse
	b.must(t, 200, &list, "vera", "GET", "/v1/operations?state=awaiting_approval&tool=capture_payment&workflow_id=wf_ops&limit=10", "", nil)
	require.Len(t, list.Operations, 1)
	require.Equal(t, id, list.Operations[0].ID)
	b.must(t, 200, &list, "vera", "GET", "/v1/operations?older_than=1h", "", nil)
	require.Empty(t, list.Operations, "nothing has been waiting an hour")
	b.must(t, 200, &list, "vera", "GET", "/v1/operations?state=escalated", "", nil)
	require.Empty(t, list.Operations)
	for _, q := range []string{"state=bogus", "limit=0", "limit=1001", "limit=x", "older_than=-1m", "older_than=soon",
		"sort=age", "state=escalated&state=rejected", "tool=", "%zz"} {
		b.refused(t, 400, api.CodeInvalid, "vera", "GET", "/v1/operations?"+q, "", nil)
	}
	hash := b.show(t, "vera", id).Operation.ArgsHash
	b.refused(t, 403, api.CodeForbidden, "vera", "POST", "/v1/operations/{id}/approve", id, approveBody{hash, "I only look"})
	b.refused(t, 403, api.CodeForbidden, "vera", "POST", "/v1/operations/{id}/deny", id, reasonBody{"I only look"})
	b.refused(t, 403, api.CodeForbidden, "vera", "POST", "/v1/operations/{id}/cancel", id, reasonBody{"I only look"})
	b.refused(t, 403, api.CodeForbidden, "vera", "POST", "/v1/operations/{id}/resolve", id, map[string]string{"verdict": "applied", "external_object_id": "ch_1", "reason": "I only look"})
	b.refused(t, 403, api.CodeForbidden, "vera", "POST", "/v1/operations/{id}/compensate", id, reasonBody{"I only look"})
	b.refused(t, 404, api.CodeNotFound, "vera", "GET", "/v1/operations/{id}", "op_nope", nil)
	b.refused(t, 404, api.CodeNotFound, "oscar", "POST", "/v1/operations/{id}/cancel", "op_nope", reasonBody{"gone"})
	b.refused(t, 404, api.CodeNotFound, "vera", "GET", "/v1/operations/{id}", "op_%2e%2e", nil)

	// Bodies: strict and bounded, refused before anything is written.
	const cancel = "/v1/operations/{id}/cancel"
	for _, body := range []string{`{"reason":"a","reason":"b"}`, `{"Reason":"a"}`, `{"reason":"a","force":"yes"}`,
		`{"reason":1}`, `["a"]`, `{"reason":"a"}{}`, ``} {
		b.refused(t, 400, api.CodeInvalid, "oscar", "POST", cancel, id, body)
	}
	b.refused(t, 413, api.CodeTooLarge, "oscar", "POST", cancel, id, `{"reason":"`+strings.Repeat("a", 20<<10)+`"}`)
	b.refused(t, 400, api.CodeInvalid, "oscar", "POST", cancel, id, reasonBody{strings.Repeat("a", 501)})
	b.refused(t, 400, api.CodeInvalid, "alice", "POST", "/v1/operations/{id}/approve", id, approveBody{"not-a-hash", "looks fine"})
	b.refused(t, 404, api.CodeNotFound, "oscar", "POST", cancel, "op_%2e%2e", reasonBody{"no such id"})

	d := b.show(t, "vera", id)
	require.Equal(t, op.StateAwaitingApproval, d.Operation.State, "nothing moved it")
	audit := auditOutcomes(d)
	for _, action := range []string{"approve", "deny", "cancel", "resolve", "compensate"} {
		require.Len(t, audit["vera "+action], 1, action)
		require.Contains(t, audit["vera "+action][0], "forbidden", action)
	}
	// Writes refused before the human loop saw them (malformed bodies, a
	// malformed args hash) are audited too, with who sent them and why.
	require.Len(t, audit["oscar cancel"], 9, "seven malformed bodies, one too large, one over-long reason")
	for _, outcome := range audit["oscar cancel"] {
		require.NotEqual(t, "ok", outcome)
	}
	require.Len(t, audit["alice approve"], 1)
	require.Contains(t, audit["alice approve"][0], "args_hash is required")
	// A write naming no operation an id can have is audited under none.
	unnamed, err := b.d.Services.Store.AuditTrail(b.ctx, "")
	require.NoError(t, err)
	require.Len(t, unnamed, 1)
	require.Equal(t, "oscar", unnamed[0].Actor)
	require.Equal(t, "cancel", unnamed[0].Action)
	require.Contains(t, unnamed[0].Outcome, "not found")
	require.JSONEq(t, `{"path_id":"op_.."}`, string(unnamed[0].Detail.(json.RawMessage)))

	// 401s are counted by reason; no token reaches the metrics, which
	// any role reads.
	metricsReq, err := http.NewRequest(http.MethodGet, b.url+"/metrics", nil)
	require.NoError(t, err)
	metricsReq.Header.Set("Authorization", "Bearer "+b.tok["vera"])
	resp, err = http.DefaultClient.Do(metricsReq)
	require.NoError(t, err)
	metrics := string(readAll(t, resp))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Regexp(t, regexp.MustCompile(`opledger_api_unauthorized_total\{reason="unknown"\} 2`), metrics)
	require.Regexp(t, regexp.MustCompile(`opledger_api_unauthorized_total\{reason="missing"\} 2`), metrics)
	require.Regexp(t, regexp.MustCompile(`opledger_api_unauthorized_total\{reason="malformed"\} 4`), metrics)
	require.Regexp(t, regexp.MustCompile(`opledger_api_requests_total\{code="403",route="POST /v1/operations/\{id\}/approve"\} 1`), metrics)
	// Refusals after authentication are counted by stable reason.
	for _, reason := range []string{"forbidden", "invalid_query", "invalid_body"} {
		require.Regexp(t, regexp.MustCompile(`opledger_api_refused_total\{reason="`+reason+`"\} [1-9]`), metrics, reason)
	}
	require.NotContains(t, metrics, bogus)
	for _, tok := range b.tok {
		require.NotContains(t, metrics, tok)
	}
	// Only liveness is open; the other operational routes answer a token
	// of any role and refuse none, as documented.
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/v1/openapi.yaml"} {
		for _, token := range []string{"", b.tok["vera"]} {
			req, err := http.NewRequest(http.MethodGet, b.url+path, nil)
			require.NoError(t, err)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			data := readAll(t, resp)
			want := http.StatusOK
			if token == "" && path != "/healthz" {
				want = http.StatusUnauthorized
			}
			require.Equal(t, want, resp.StatusCode, "%s with token %v: %s", path, token != "", data)
			b.spec.check(t, "GET", path, resp.StatusCode, resp.Header.Get("Content-Type"), data)
		}
	}
}

// Deny and cancel end an operation awaiting approval without sending it;
// cancel needs an operator; nothing reached the vendor.
func TestDenyAndCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	denied := b.bigCapture(t, "order_deny")
	cancelled := b.bigCapture(t, "order_cancel")

	b.refused(t, 403, api.CodeForbidden, "oscar", "POST", "/v1/operations/{id}/deny", denied, reasonBody{"operators do not deny"})
	var w api.WriteResponse
	b.must(t, 200, &w, "bob", "POST", "/v1/operations/{id}/deny", denied, reasonBody{"amount does not match the invoice"})
	require.Equal(t, op.StateRejected, w.Operation.State)
	require.Equal(t, "denied", w.Approval.Status)
	b.refused(t, 409, api.CodeState, "alice", "POST", "/v1/operations/{id}/approve", denied, approveBody{w.Operation.ArgsHash, "too late"})
	b.refused(t, 409, api.CodeState, "oscar", "POST", "/v1/operations/{id}/cancel", denied, reasonBody{"already rejected"})

	b.refused(t, 403, api.CodeForbidden, "alice", "POST", "/v1/operations/{id}/cancel", cancelled, reasonBody{"approvers do not cancel"})
	b.must(t, 200, &w, "oscar", "POST", "/v1/operations/{id}/cancel", cancelled, reasonBody{"customer withdrew the order"})
	require.Equal(t, op.StateCancelled, w.Operation.State)
	d := b.show(t, "vera", cancelled)
	require.Equal(t, "cancelled", d.Approval.Status)
	last := d.Events[len(d.Events)-1]
	require.Equal(t, op.EventCancel, last.Event)
	require.Equal(t, "oscar", last.Actor)
	require.Contains(t, string(last.Detail), "customer withdrew the order")

	// The agent asking again learns it was rejected.
	res := b.propose(t, "conv_ops:order_deny:again", "capture_payment", `{"order_id":"order_deny","customer_id":"cust_<1>&co","amount_cents":2000000,"currency":"USD"}`)
	require.Equal(t, string(op.StateRejected), string(res.Status))
	require.Zero(t, b.d.Vendors.Stats().Captures)
}

// An operation whose outcome nobody can check escalates; an operator
// settles it with evidence. Then a completed capture is compensated: the
// refund is proposed by the compensating admin, who cannot approve it
// themself; an approver does, and the refund runs once.
func TestResolveAndCompensate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.d.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteTicket, Kind: vendors.FaultError500AfterCommit, Times: 1}))
	require.NoError(t, b.d.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteTicketLookup, Kind: vendors.FaultError500BeforeCommit, Times: 1}))
	res := b.propose(t, "conv_ops:ticket_1", "create_ticket", `{"conversation_id":"conv_ops","queue":"billing","summary":"double charge"}`)
	require.Equal(t, string(op.StateEscalated), string(res.Status), res.Reason)
	require.Contains(t, res.Reason, "lookups keep failing")
	esc := res.OperationID
	const resolve = "/v1/operations/{id}/resolve"
	type verdict struct {
		Verdict  string `json:"verdict"`
		ObjectID string `json:"external_object_id,omitempty"`
		Reason   string `json:"reason"`
	}
	b.refused(t, 403, api.CodeForbidden, "alice", "POST", resolve, esc, verdict{"applied", "tkt_1", "approvers do not resolve"})
	b.refused(t, 400, api.CodeInvalid, "oscar", "POST", resolve, esc, verdict{"maybe", "", "unsure"})
	b.refused(t, 400, api.CodeInvalid, "oscar", "POST", resolve, esc, verdict{"applied", "", "no object id"})
	var w api.WriteResponse
	b.must(t, 200, &w, "oscar", "POST", resolve, esc, verdict{"applied", "tkt_1", "the help desk shows ticket tkt_1 for conv_ops"})
	require.Equal(t, op.StateCompletedSuccess, w.Operation.State)
	require.Equal(t, "tkt_1", w.Operation.ExternalObjectID)
	require.Equal(t, 1, b.d.Vendors.Stats().Tickets, "resolving sends nothing")
	b.refused(t, 409, api.CodeState, "oscar", "POST", resolve, esc, verdict{"not_applied", "", "changed my mind"})
	b.refused(t, 400, api.CodeInvalid, "oscar", "POST", "/v1/operations/{id}/compensate", esc, reasonBody{"no playbook for tickets"})

	// A capture below the threshold completes at once.
	capture := b.propose(t, "conv_ops:order_small", "capture_payment", `{"order_id":"order_small","customer_id":"cust_1","amount_cents":4900,"currency":"USD"}`)
	require.Equal(t, string(op.StateCompletedSuccess), string(capture.Status))
	var c api.CompensateResponse
	b.must(t, 200, &c, "root", "POST", "/v1/operations/{id}/compensate", capture.OperationID, reasonBody{"customer returned the goods"})
	refund := c.Compensation
	require.Equal(t, "refund_payment", refund.Tool)
	require.Equal(t, capture.OperationID, refund.CompensatesID)
	require.Equal(t, "root", refund.ProposedBy)
	require.Equal(t, op.StateAwaitingApproval, refund.State)
	d := b.waitState(t, capture.OperationID, op.StateCompensating)
	last := d.Events[len(d.Events)-1]
	require.Equal(t, op.EventCompensate, last.Event)
	require.Contains(t, string(last.Detail), refund.ID, "the original's timeline names its compensation")
	// Asked again (an answer lost, a double click): the same compensation.
	var again api.CompensateResponse
	b.must(t, 200, &again, "root", "POST", "/v1/operations/{id}/compensate", capture.OperationID, reasonBody{"customer returned the goods"})
	require.Equal(t, refund.ID, again.Compensation.ID)

	b.refused(t, 403, api.CodeForbidden, "root", "POST", "/v1/operations/{id}/approve", refund.ID, approveBody{refund.ArgsHash, "my own refund"})
	b.must(t, 200, &w, "alice", "POST", "/v1/operations/{id}/approve", refund.ID, approveBody{refund.ArgsHash, "refund matches the return"})
	require.Equal(t, op.StatePendingDispatch, w.Operation.State)
	b.waitState(t, refund.ID, op.StateCompletedSuccess)
	d = b.waitState(t, capture.OperationID, op.StateCompensated)
	require.Equal(t, 1, b.d.Vendors.Stats().Refunds)
	require.Equal(t, 1, b.d.Vendors.Stats().Captures)
	require.Len(t, auditOutcomes(d)["root compensate"], 2)
	require.Equal(t, []string{"ok", "ok"}, auditOutcomes(d)["root compensate"])
}

// Reads carry no vendor header and no secret: the payments vendor's API
// key (a secret header of capture_payment) appears nowhere in what the API
// answers about an operation sent with it, and no field of an operation,
// attempt, event or audit entry is named like a header or a credential.
func TestReadsExposeNoSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	capture := b.propose(t, "conv_ops:order_secret", "capture_payment", `{"order_id":"order_secret","customer_id":"cust_1","amount_cents":4900,"currency":"USD"}`)
	require.Equal(t, string(op.StateCompletedSuccess), string(capture.Status))
	big := b.bigCapture(t, "order_secret_big")
	_, _ = b.call(t, "alice", "POST", "/v1/operations/{id}/approve", big, approveBody{strings.Repeat("f", 64), "wrong hash"})

	credential := regexp.MustCompile(`(?i)header|secret|token|authorization|password|api_?key|credential`)
	for _, id := range []string{capture.OperationID, big} {
		status, data := b.call(t, "vera", "GET", "/v1/operations/{id}", id, nil)
		require.Equal(t, 200, status)
		require.NotContains(t, string(data), b.secret)
		var v any
		require.NoError(t, json.Unmarshal(data, &v))
		walkKeys(v, func(k string) { require.NotRegexp(t, credential, k, "a field named like a credential in %s", data) })
	}
	status, data := b.call(t, "vera", "GET", "/v1/operations", "", nil)
	require.Equal(t, 200, status)
	require.NotContains(t, string(data), b.secret)
	d := b.show(t, "vera", capture.OperationID)
	require.Len(t, d.Attempts, 1, "the capture was sent with the secret header")
	require.NotEmpty(t, d.Attempts[0].ExternalObjectID)
}

func walkKeys(v any, fn func(string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			fn(k)
			walkKeys(x, fn)
		}
	case []any:
		for _, x := range v {
			walkKeys(x, fn)
		}
	}
}
