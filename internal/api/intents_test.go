package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/examples"
	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// allRoutes is every route a process's API serves: the operators' and the
// agents'.
func allRoutes() []api.Route { return append(api.Routes(), api.IntentRoutes()...) }

// mountIntents mounts the intent routes next to a's, without NATS.
func mountIntents(t *testing.T, a *api.API, mux *http.ServeMux) {
	t.Helper()
	in, err := api.NewIntents(api.IntentsConfig{API: a})
	require.NoError(t, err)
	in.Mount(mux)
}

// The agents of the intent tests: their tenant and workflow prefix.
var agents = map[string][2]string{
	"bot":      {"default", "wf_bot"}, // bound to the workflows wf_bot…
	"free":     {"default", ""},       // every workflow of the default tenant
	"acme-bot": {"acme", ""},
}

type intentBundle struct {
	ctx    context.Context
	d      *app.Stack
	spec   *spec
	specMu sync.Mutex // the spec's compiler is not safe for the parallel subtests
	url    string
	tok    map[string]string
}

// setupIntents starts a whole opledger (real Postgres, real JetStream,
// the stand-in vendors) serving both APIs, with the agents above and
// operators alice (approver) and vera (viewer).
func setupIntents(t *testing.T) *intentBundle {
	t.Helper()
	b := &intentBundle{tok: map[string]string{}, spec: loadSpec(t)}
	var entries []api.TokenEntry
	for actor, scope := range agents {
		token, e, err := api.GenerateAgentToken(actor, scope[0], scope[1])
		require.NoError(t, err)
		b.tok[actor] = token
		entries = append(entries, e)
	}
	for actor, role := range map[string]ops.Role{"alice": ops.RoleApprover, "vera": ops.RoleViewer} {
		token, e, err := api.GenerateToken(actor, role)
		require.NoError(t, err)
		b.tok[actor] = token
		entries = append(entries, e)
	}
	tokens, err := api.NewTokens(entries)
	require.NoError(t, err)
	b.d, err = app.StartStack(context.Background(), app.StackConfig{
		Infra:     app.InfraConfig{DatabaseURL: testdb.New(t), MemoryStreams: true},
		Registry:  app.RegistryConfig{YAML: examples.Registry},
		HTTPAddr:  "127.0.0.1:0",
		APITokens: tokens,
		Services: app.ServicesConfig{Relays: 1,
			Reconcile: reconcile.Config{SettleDelay: 300 * time.Millisecond},
			Maintain:  maintain.Config{SweepInterval: 200 * time.Millisecond, ElectInterval: 100 * time.Millisecond}},
	})
	require.NoError(t, err)
	t.Cleanup(b.d.Close)
	b.url = b.d.HTTP.URL()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	b.ctx = ctx
	return b
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request as actor to path (a route with {id} filled in and
// a query), checks the answer against the OpenAPI document (route is the
// documented path) and returns it.
func (b *intentBundle) do(t *testing.T, ctx context.Context, actor, method, route, path, body string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.url+path, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+b.tok[actor])
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	data := readAll(t, resp)
	b.specMu.Lock()
	defer b.specMu.Unlock()
	b.spec.check(t, method, route, resp.StatusCode, resp.Header.Get("Content-Type"), data)
	return answer{status: resp.StatusCode, header: resp.Header, body: data}
}

// post submits an intent as actor and decodes the answer, expecting status.
func (b *intentBundle) post(t *testing.T, actor, query, body string, status int) api.IntentResult {
	t.Helper()
	a := b.do(t, b.ctx, actor, "POST", "/v1/intents", "/v1/intents"+query, body)
	require.Equal(t, status, a.status, "%s", a.body)
	res := api.IntentResult{}
	require.NoError(t, json.Unmarshal(a.body, &res))
	require.NotNil(t, res.Result)
	return res
}

// get reads an operation as actor.
func (b *intentBundle) get(t *testing.T, actor, id, query string) answer {
	t.Helper()
	return b.do(t, b.ctx, actor, "GET", "/v1/intents/operations/{id}", "/v1/intents/operations/"+id+query, "")
}

func (b *intentBundle) getResult(t *testing.T, actor, id, query string) api.IntentResult {
	t.Helper()
	a := b.get(t, actor, id, query)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	res := api.IntentResult{}
	require.NoError(t, json.Unmarshal(a.body, &res))
	return res
}

// errorOf decodes an error answer, expecting status and code.
func errorOf(t *testing.T, a answer, status int, code string) api.ErrorDetail {
	t.Helper()
	require.Equal(t, status, a.status, "%s", a.body)
	var e api.ErrorBody
	require.NoError(t, json.Unmarshal(a.body, &e))
	require.Equal(t, code, e.Error.Code, e.Error.Message)
	return e.Error
}

func capture(event, workflow, order string, cents int) string {
	return fmt.Sprintf(`{"spec":"opledger.intent.v1","event_id":%q,"workflow_id":%q,"tool":"capture_payment",`+
		`"args":{"order_id":%q,"customer_id":"cust_1","amount_cents":%d,"currency":"USD"}}`, event, workflow, order, cents)
}

// The intent API end to end, on one stack: each subtest uses its own
// workflows, orders and event ids.
func TestIntentAPI(t *testing.T) {
	t.Parallel()
	b := setupIntents(t)

	// An intent submitted over HTTP runs once and is answered with its
	// final result; the same event again is duplicate_event, a re-planned
	// call (new event id, same business arguments) duplicate_operation,
	// both the same operation; the same event with other arguments a
	// conflict. The vendor saw one capture.
	t.Run("submit and wait, retry, re-plan, conflict", func(t *testing.T) {
		t.Parallel()
		body := capture("conv_h:call_1", "wf_bot_pay", "order_h1", 4900)
		res := b.post(t, "bot", "?wait=final", body, http.StatusOK)
		require.Equal(t, string(op.StateCompletedSuccess), res.Status)
		require.Equal(t, string(op.DecisionNew), res.Decision)
		require.False(t, res.Replayed)
		require.True(t, res.Final)
		require.NotEmpty(t, res.OperationID)
		require.NotEmpty(t, res.ExternalObjectID, "the vendor's id")
		require.Equal(t, 1, res.Attempts)
		require.Equal(t, "none", res.RetryRecommendation)
		require.NotEmpty(t, res.SafeUserMessage)
		require.Equal(t, "conv_h:call_1", res.EventID)
		require.NotNil(t, res.Receipt)
		require.Equal(t, res.OperationID, res.Receipt.OperationID)
		require.True(t, strings.HasPrefix(res.Receipt.Digest, "sha256:"))
		require.Equal(t, "/v1/intents/operations/"+res.OperationID, res.FollowURL)
		require.Nil(t, res.Follow, "no MCP tool call over HTTP")

		again := b.post(t, "bot", "?wait=final", body, http.StatusOK)
		require.Equal(t, res.OperationID, again.OperationID)
		require.Equal(t, string(op.DecisionDuplicateEvent), again.Decision)
		require.True(t, again.Replayed)
		require.Equal(t, string(op.StateCompletedSuccess), again.Status)
		require.Equal(t, res.Receipt.Digest, again.Receipt.Digest, "the same operation at the same version, the same receipt")

		// The same call with the fields in another order and "usd": the
		// same canonical intent, so the same event.
		reordered := `{"args":{"currency":"usd","amount_cents":4900,"customer_id":"cust_1","order_id":"order_h1"},` +
			`"tool":"capture_payment","workflow_id":"wf_bot_pay","event_id":"conv_h:call_1","spec":"opledger.intent.v1"}`
		require.Equal(t, string(op.DecisionDuplicateEvent), b.post(t, "bot", "", reordered, http.StatusOK).Decision)

		replan := b.post(t, "bot", "?wait=final", capture("conv_h:call_2", "wf_bot_pay", "order_h1", 4900), http.StatusOK)
		require.Equal(t, res.OperationID, replan.OperationID)
		require.Equal(t, string(op.DecisionDuplicateOperation), replan.Decision)
		require.True(t, replan.Replayed)

		conflict := b.post(t, "bot", "", capture("conv_h:call_1", "wf_bot_pay", "order_h1", 5000), http.StatusUnprocessableEntity)
		require.Equal(t, string(op.DecisionConflict), conflict.Decision)
		require.Equal(t, string(op.StateRejected), conflict.Status)
		require.NotEmpty(t, conflict.Reason)

		require.Equal(t, 1, b.d.Vendors.EffectsByKey(vendors.KindCapture)[res.IdempotencyKey], "one capture at the vendor")

		// The submission is in the operators' audit trail, as the agent.
		var d ops.Detail
		a := b.do(t, b.ctx, "vera", "GET", "/v1/operations/{id}", "/v1/operations/"+res.OperationID, "")
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		require.NoError(t, json.Unmarshal(a.body, &d))
		require.Equal(t, "bot", d.Operation.ProposedBy, "the token's agent proposed it")
		var audited []string
		for _, e := range d.Audit {
			require.Equal(t, "bot", e.Actor)
			require.Equal(t, string(ops.RoleAgent), e.Role)
			require.Equal(t, "submit_intent", e.Action)
			audited = append(audited, e.Outcome)
		}
		require.Equal(t, []string{"ok", "ok", "ok", "ok"}, audited[:4], "each submission audited")

		// The agent reads it, in the same shape.
		got := b.getResult(t, "bot", res.OperationID, "")
		require.Equal(t, "read", got.Decision)
		require.Equal(t, res.Receipt.Digest, got.Receipt.Digest)
		list := b.do(t, b.ctx, "bot", "GET", "/v1/intents/operations", "/v1/intents/operations?workflow_id=wf_bot_pay", "")
		require.Equal(t, http.StatusOK, list.status, "%s", list.body)
		var l api.IntentList
		require.NoError(t, json.Unmarshal(list.body, &l))
		require.Len(t, l.Operations, 1)
		require.Equal(t, res.OperationID, l.Operations[0].OperationID)
	})

	// A wait that ends before the operation is at rest is answered 202
	// with the latest state and a Location that follows it to the end;
	// closing a request while it waits does not cancel the work.
	t.Run("wait ends: 202 and Location; a cancelled request changes nothing", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, b.d.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteEmail, Kind: vendors.FaultLatency, Times: 2, Delay: 1200 * time.Millisecond}))
		email := func(event, to string) string {
			return fmt.Sprintf(`{"spec":"opledger.intent.v1","event_id":%q,"workflow_id":"wf_bot_mail","tool":"send_email",`+
				`"args":{"to":%q,"template":"payment_receipt","reference":"order_w1"}}`, event, to)
		}
		res := b.post(t, "bot", "?wait=200ms", email("conv_w:call_1", "w1@example.com"), http.StatusAccepted)
		require.True(t, res.WaitEnded)
		require.False(t, res.Final)
		require.NotEmpty(t, res.OperationID)
		require.Contains(t, res.Next, "GET /v1/intents/operations/"+res.OperationID)
		loc := "/v1/intents/operations/" + res.OperationID
		require.Equal(t, loc, res.FollowURL)
		// The Location, followed with a wait, ends at the outcome.
		done := b.getResult(t, "bot", res.OperationID, "?wait=final")
		require.Equal(t, string(op.StateCompletedSuccess), done.Status, done.Reason)
		require.False(t, done.WaitEnded)

		// A request given up while it waits: the email is still sent, once.
		ctx, cancel := context.WithTimeout(b.ctx, 600*time.Millisecond)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "POST", b.url+"/v1/intents?wait=final", strings.NewReader(email("conv_w:call_2", "w2@example.com")))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+b.tok["bot"])
		_, err = http.DefaultClient.Do(req)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		again := b.post(t, "bot", "?wait=final", email("conv_w:call_2", "w2@example.com"), http.StatusOK)
		require.Equal(t, string(op.StateCompletedSuccess), again.Status, again.Reason)
		require.Equal(t, string(op.DecisionDuplicateEvent), again.Decision, "the cancelled request's intent was recorded")
		require.Equal(t, 1, b.d.Vendors.EffectsByKey(vendors.KindEmail)[again.IdempotencyKey], "sent once")
		require.Eventually(t, func() bool {
			var d ops.Detail
			a := b.do(t, b.ctx, "vera", "GET", "/v1/operations/{id}", "/v1/operations/"+again.OperationID, "")
			require.NoError(t, json.Unmarshal(a.body, &d))
			return slices.Contains(auditOutcomes(&d)["bot submit_intent"], "ok (the caller went away while waiting)")
		}, 10*time.Second, 50*time.Millisecond, "the given-up request is audited with its operation")
		require.Equal(t, 1, b.d.Vendors.EffectsBy(vendors.KindEmail, vendors.AttrTo)["w2@example.com"], "sent once")
	})

	// A call above the approval threshold is answered awaiting_approval
	// with where an approver decides; the agent's token cannot approve it
	// (refused and audited), an approver can, and it then runs.
	t.Run("approval", func(t *testing.T) {
		t.Parallel()
		res := b.post(t, "bot", "?wait=final", capture("conv_a:call_1", "wf_bot_big", "order_a1", 2000000), http.StatusOK)
		require.Equal(t, string(op.StateAwaitingApproval), res.Status)
		require.Equal(t, "await_approval", res.RetryRecommendation)
		require.NotNil(t, res.Approval)
		require.Equal(t, "/v1/operations/"+res.OperationID, res.Approval.URL)
		require.Len(t, res.Approval.ArgsHash, 64)

		approve := fmt.Sprintf(`{"args_hash":%q,"reason":"I am sure"}`, res.Approval.ArgsHash)
		a := b.do(t, b.ctx, "bot", "POST", "/v1/operations/{id}/approve", "/v1/operations/"+res.OperationID+"/approve", approve)
		errorOf(t, a, http.StatusForbidden, api.CodeForbidden)
		for _, path := range []string{"/v1/operations/" + res.OperationID, "/v1/operations"} {
			route := strings.Replace(path, res.OperationID, "{id}", 1)
			errorOf(t, b.do(t, b.ctx, "bot", "GET", route, path, ""), http.StatusForbidden, api.CodeForbidden)
		}

		a = b.do(t, b.ctx, "alice", "POST", "/v1/operations/{id}/approve", "/v1/operations/"+res.OperationID+"/approve",
			fmt.Sprintf(`{"args_hash":%q,"reason":"confirmed with the customer"}`, res.Approval.ArgsHash))
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		done := b.getResult(t, "bot", res.OperationID, "?wait=final")
		require.Equal(t, string(op.StateCompletedSuccess), done.Status)

		var d ops.Detail
		a = b.do(t, b.ctx, "vera", "GET", "/v1/operations/{id}", "/v1/operations/"+res.OperationID, "")
		require.NoError(t, json.Unmarshal(a.body, &d))
		outcomes := auditOutcomes(&d)
		require.Len(t, outcomes["bot approve"], 1, "the agent's attempt is audited")
		require.Contains(t, outcomes["bot approve"][0], "forbidden")
		require.Equal(t, []string{"ok"}, outcomes["alice approve"])
	})

	// Tenants and workflow prefixes are walls: another tenant's operations
	// are not found, a workflow outside the prefix is refused, and a call
	// that is an operation of a workflow the token may not see is refused
	// without naming it. Operators' tokens do not use the intent routes.
	t.Run("tenants and workflows", func(t *testing.T) {
		t.Parallel()
		other := b.post(t, "free", "?wait=final", capture("conv_t:call_1", "wf_other", "order_t1", 100), http.StatusOK)
		require.Equal(t, string(op.StateCompletedSuccess), other.Status)
		// Another tenant: the same business arguments are its own action.
		acme := b.post(t, "acme-bot", "?wait=final", capture("conv_t:call_1", "wf_other", "order_t1", 100), http.StatusOK)
		require.Equal(t, string(op.DecisionNew), acme.Decision)
		require.NotEqual(t, other.OperationID, acme.OperationID)

		errorOf(t, b.get(t, "acme-bot", other.OperationID, ""), http.StatusNotFound, api.CodeNotFound)
		errorOf(t, b.get(t, "free", acme.OperationID, ""), http.StatusNotFound, api.CodeNotFound)
		errorOf(t, b.get(t, "bot", other.OperationID, ""), http.StatusNotFound, api.CodeNotFound)
		require.Equal(t, other.OperationID, b.getResult(t, "free", other.OperationID, "").OperationID)

		list := func(actor, workflow string) answer {
			return b.do(t, b.ctx, actor, "GET", "/v1/intents/operations", "/v1/intents/operations?workflow_id="+workflow, "")
		}
		var l api.IntentList
		a := list("acme-bot", "wf_other")
		require.NoError(t, json.Unmarshal(a.body, &l))
		require.Len(t, l.Operations, 1)
		require.Equal(t, acme.OperationID, l.Operations[0].OperationID, "only its tenant's")
		errorOf(t, list("bot", "wf_other"), http.StatusForbidden, api.CodeForbidden)

		// Submitting outside the prefix, and a call that is another
		// workflow's operation (the same business key): refused, nothing named.
		errorOf(t, b.do(t, b.ctx, "bot", "POST", "/v1/intents", "/v1/intents", capture("conv_t:call_2", "wf_other", "order_t2", 100)),
			http.StatusForbidden, api.CodeForbidden)
		e := errorOf(t, b.do(t, b.ctx, "bot", "POST", "/v1/intents", "/v1/intents", capture("conv_t:call_3", "wf_bot_t", "order_t1", 100)),
			http.StatusForbidden, api.CodeForbidden)
		require.NotContains(t, e.Message, other.OperationID)

		// Operators' tokens: not on the intent routes (the submission
		// refused and audited).
		errorOf(t, b.do(t, b.ctx, "alice", "POST", "/v1/intents", "/v1/intents", capture("conv_t:call_4", "wf_x", "order_t4", 100)),
			http.StatusForbidden, api.CodeForbidden)
		errorOf(t, b.get(t, "vera", other.OperationID, ""), http.StatusForbidden, api.CodeForbidden)
		errorOf(t, list("vera", "wf_other"), http.StatusForbidden, api.CodeForbidden)
		require.Equal(t, 1, b.d.Vendors.EffectsByKey(vendors.KindCapture)[other.IdempotencyKey])
	})

	// What the registry refuses is answered 422 before anything is sent.
	t.Run("unknown tool and bad arguments", func(t *testing.T) {
		t.Parallel()
		res := b.post(t, "bot", "", `{"spec":"opledger.intent.v1","event_id":"conv_r:1","workflow_id":"wf_bot_r","tool":"nope","args":{}}`,
			http.StatusUnprocessableEntity)
		require.Equal(t, string(op.DecisionRejected), res.Decision)
		require.Contains(t, res.Reason, "not registered")
		res = b.post(t, "bot", "", capture("conv_r:2", "wf_bot_r", "order_r", -1), http.StatusUnprocessableEntity)
		require.Equal(t, string(op.StateRejected), res.Status)
		require.Empty(t, res.OperationID)
	})

	// Hostile bodies and queries: 400 (413 when too large) with a stable
	// reason; nothing reaches the ledger.
	t.Run("hostile bodies", func(t *testing.T) {
		t.Parallel()
		good := capture("conv_x:1", "wf_bot_x", "order_x", 100)
		for name, c := range map[string]struct {
			query, body, reason string
			status              int
		}{
			"oversize":           {"", `{"spec":"opledger.intent.v1","event_id":"e","workflow_id":"wf_bot_x","tool":"t","args":{"a":"` + strings.Repeat("x", 1<<20) + `"}}`, api.ReasonTooLarge, 413},
			"duplicate key":      {"", strings.Replace(good, `"tool"`, `"tool":"send_email","tool"`, 1), api.ReasonDuplicateField, 400},
			"duplicate arg":      {"", strings.Replace(good, `"order_id"`, `"order_id":"order_y","order_id"`, 1), api.ReasonDuplicateField, 400},
			"unknown field":      {"", strings.Replace(good, `"tool"`, `"tenant":"acme","tool"`, 1), api.ReasonUnknownField, 400},
			"field case":         {"", strings.Replace(good, `"tool"`, `"Tool"`, 1), api.ReasonUnknownField, 400},
			"unknown actor key":  {"", strings.Replace(good, `"tool"`, `"actor":{"type":"agent","id":"bot","role":"admin"},"tool"`, 1), api.ReasonUnknownField, 400},
			"invalid UTF-8":      {"", strings.Replace(good, "order_x", "order_\xff", 1), api.ReasonInvalidUTF8, 400},
			"lone surrogate":     {"", strings.Replace(good, "order_x", `order_\ud800`, 1), api.ReasonInvalidUTF8, 400},
			"not JSON":           {"", good[:len(good)-3], api.ReasonNotJSON, 400},
			"not an object":      {"", `["spec"]`, api.ReasonNotObject, 400},
			"two objects":        {"", good + good, api.ReasonNotOneObject, 400},
			"no event id":        {"", strings.Replace(good, `"conv_x:1"`, `""`, 1), api.ReasonInvalidIntent, 400},
			"number for a text":  {"", strings.Replace(good, `"wf_bot_x"`, `7`, 1), api.ReasonInvalidIntent, 400},
			"someone else":       {"", strings.Replace(good, `"tool"`, `"actor":{"type":"user","id":"alice"},"tool"`, 1), api.ReasonActorMismatch, 400},
			"empty body":         {"", "", api.ReasonNotJSON, 400},
			"bad wait":           {"?wait=forever", good, api.ReasonInvalidQuery, 400},
			"unknown parameter":  {"?tenant=acme", good, api.ReasonInvalidQuery, 400},
			"repeated parameter": {"?wait=final&wait=1s", good, api.ReasonInvalidQuery, 400},
		} {
			a := b.do(t, b.ctx, "bot", "POST", "/v1/intents", "/v1/intents"+c.query, c.body)
			code := api.CodeInvalid
			if c.status == 413 {
				code = api.CodeTooLarge
			}
			e := errorOf(t, a, c.status, code)
			require.Equal(t, c.reason, e.Reason, "%s: %s", name, e.Message)
		}
		a := b.do(t, b.ctx, "bot", "GET", "/v1/intents/operations", "/v1/intents/operations?workflow_id=wf_bot_x", "")
		require.JSONEq(t, `{"workflow_id":"wf_bot_x","operations":[]}`, string(a.body), "nothing reached the ledger")
		for _, q := range []string{"", "?workflow_id=wf_bot_x&limit=0", "?workflow_id=wf_bot_x&state=done", "?workflow_id=a.b", "?workflow_id=wf_bot_x&x=1"} {
			e := errorOf(t, b.do(t, b.ctx, "bot", "GET", "/v1/intents/operations", "/v1/intents/operations"+q, ""), 400, api.CodeInvalid)
			require.Equal(t, api.ReasonInvalidQuery, e.Reason, q)
		}
		errorOf(t, b.get(t, "bot", "op_missing", ""), http.StatusNotFound, api.CodeNotFound)
		errorOf(t, b.get(t, "bot", "op_missing", "?wait=soon"), http.StatusBadRequest, api.CodeInvalid)
		a = b.do(t, b.ctx, "", "POST", "/v1/intents", "/v1/intents", good)
		errorOf(t, a, http.StatusUnauthorized, api.CodeUnauthenticated)
	})
}

// An intent that a full INTENTS refuses is a 503 with reason intents_full,
// saying it was not stored, not the generic "could not be handed to NATS"
// whose outcome is unknown. Breaking it: without the API's case the reason
// is missing.
func TestIntentAPIWhenIntentsFull(t *testing.T) {
	t.Parallel()
	b := setupIntents(t)
	nc, err := nats.Connect(b.d.Infra.NATSURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(b.ctx, wire.StreamIntents)
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	cfg.MaxBytes = 1 // an operator's bound, which no intent fits in
	_, err = js.UpdateStream(b.ctx, cfg)
	require.NoError(t, err)

	a := b.do(t, b.ctx, "bot", "POST", "/v1/intents", "/v1/intents", capture("wf_bot_full:call_1", "wf_bot_full", "ord_full_1", 100))
	e := errorOf(t, a, http.StatusServiceUnavailable, api.CodeUnavailable)
	require.Equal(t, api.ReasonIntentsFull, e.Reason, e.Message)
	require.Contains(t, e.Message, "was not stored")
}
