package registry_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	vendorsim "github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/adapter/httpadapter"
	"github.com/opledger/opledger/pkg/canon"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
)

var vendors = registry.Options{Vendors: map[string]string{
	"payments": "http://127.0.0.1:9", "email": "http://127.0.0.1:9", "tickets": "http://127.0.0.1:9",
	"crm": "http://127.0.0.1:9", "accounts": "http://127.0.0.1:9",
}}

func loadExample(t *testing.T) *registry.Registry {
	t.Helper()
	data, err := os.ReadFile("../../examples/registry.yaml")
	require.NoError(t, err)
	reg, err := registry.Load(data, vendors)
	require.NoError(t, err)
	return reg
}

func TestExampleRegistryLoads(t *testing.T) {
	t.Parallel()
	reg := loadExample(t)
	require.Equal(t, []string{"capture_payment", "create_payment_intent", "create_ticket", "credit_account", "get_account_status", "refund_payment", "send_email", "update_crm_record"}, reg.Names())
	capture, err := reg.Tool("capture_payment")
	require.NoError(t, err)
	require.Equal(t, op.ClassExternalIrreversible, capture.Class)
	require.True(t, capture.Lease.Required)
	require.True(t, capture.Adapter.VendorIdempotency)
	require.NotNil(t, capture.Adapter.HTTP.Lookup)
	require.Equal(t, "refund_payment", capture.Compensation.Tool)
	// A refund and an account credit hold one lease: the customer's.
	for tool, args := range map[string]string{
		"refund_payment": `{"charge_id":"ch_1","customer_id":"cust_1","amount_cents":5}`,
		"credit_account": `{"customer_id":"cust_1","offer_id":"offer_1","amount_cents":5}`,
	} {
		tl, err := reg.Tool(tool)
		require.NoError(t, err)
		require.True(t, tl.Lease.Required, tool)
		p, err := tl.Prepare(registry.Proposal{WorkflowID: "wf", Args: []byte(args)})
		require.NoError(t, err, tool)
		require.Equal(t, [2]string{"customer", "cust_1"}, [2]string{p.Operation.EntityType, p.Operation.EntityID}, tool)
	}
	refund, _ := reg.Tool("refund_payment")
	require.Equal(t, []registry.Guard{{Kind: registry.GuardTotalAtMost, Scope: "charge_id", Field: "amount_cents",
		LimitTool: "capture_payment", LimitField: "amount_cents"}}, refund.Guards)
	email, err := reg.Tool("send_email")
	require.NoError(t, err)
	require.False(t, email.Adapter.VendorIdempotency)
	_, err = reg.Tool("launch_missiles")
	require.ErrorIs(t, err, op.ErrNotFound)
}

func TestPrepareSameIntentSameKey(t *testing.T) {
	t.Parallel()
	tool, err := loadExample(t).Tool("capture_payment")
	require.NoError(t, err)
	variants := []string{
		`{"order_id":"order_123","customer_id":"cust_456","amount_cents":4900,"currency":"USD"}`,
		`{"currency":"usd","amount_cents":4900,"customer_id":"cust_456","order_id":" order_123 "}`,
		"{\n  \"amount_cents\": 4900, \"order_id\": \"order_123\",\n \"currency\": \"Usd\", \"customer_id\": \"cust_456\"}",
	}
	var keys, hashes []string
	for _, v := range variants {
		p, err := tool.Prepare(registry.Proposal{WorkflowID: "wf_1", Args: []byte(v)})
		require.NoError(t, err, v)
		keys = append(keys, p.Operation.IdempotencyKey)
		hashes = append(hashes, p.Operation.ArgsHash)
		require.Equal(t, "order_123", p.Operation.EntityID)
		require.Equal(t, "order", p.Operation.EntityType)
		require.Equal(t, op.EventEnqueue, p.Initial)
		require.Equal(t, op.StatePlanned, p.Operation.State)
	}
	for i := range keys {
		require.Equal(t, "payment:order_123:capture:4900:USD:v1", keys[i])
		require.Equal(t, hashes[0], hashes[i])
	}
	other, err := tool.Prepare(registry.Proposal{WorkflowID: "wf_1", Args: []byte(`{"order_id":"order_123","customer_id":"cust_456","amount_cents":4901,"currency":"USD"}`)})
	require.NoError(t, err)
	require.NotEqual(t, keys[0], other.Operation.IdempotencyKey)
}

func TestPrepareRejectsBadArgs(t *testing.T) {
	t.Parallel()
	tool, err := loadExample(t).Tool("capture_payment")
	require.NoError(t, err)
	for name, args := range map[string]string{
		"float amount":    `{"order_id":"o","customer_id":"c","amount_cents":49.5,"currency":"USD"}`,
		"unknown field":   `{"order_id":"o","customer_id":"c","amount_cents":49,"currency":"USD","card":"x"}`,
		"missing order":   `{"customer_id":"c","amount_cents":49,"currency":"USD"}`,
		"bad currency":    `{"order_id":"o","customer_id":"c","amount_cents":49,"currency":"DOGE"}`,
		"duplicate key":   `{"order_id":"o","order_id":"p","customer_id":"c","amount_cents":49,"currency":"USD"}`,
		"not an object":   `[1,2]`,
		"negative amount": `{"order_id":"o","customer_id":"c","amount_cents":-5,"currency":"USD"}`,
	} {
		_, err := tool.Prepare(registry.Proposal{WorkflowID: "wf", Args: []byte(args)})
		require.Error(t, err, name)
		require.ErrorIs(t, err, canon.ErrInvalidArgs, name)
	}
	_, err = tool.Prepare(registry.Proposal{Args: []byte(`{}`)})
	require.ErrorIs(t, err, op.ErrInvalid, "workflow id required")
}

func TestApprovalRules(t *testing.T) {
	t.Parallel()
	reg := loadExample(t)
	capture, _ := reg.Tool("capture_payment")
	big, err := capture.Prepare(registry.Proposal{WorkflowID: "wf", Args: []byte(`{"order_id":"o","customer_id":"c","amount_cents":1000001,"currency":"USD"}`)})
	require.NoError(t, err)
	require.Equal(t, op.EventRequireApproval, big.Initial)
	small, err := capture.Prepare(registry.Proposal{WorkflowID: "wf", Args: []byte(`{"order_id":"o","customer_id":"c","amount_cents":1000000,"currency":"USD"}`)})
	require.NoError(t, err)
	require.Equal(t, op.EventEnqueue, small.Initial)
	refund, _ := reg.Tool("refund_payment")
	r, err := refund.Prepare(registry.Proposal{WorkflowID: "wf", Args: []byte(`{"charge_id":"ch_1","customer_id":"cust_1","amount_cents":5}`)})
	require.NoError(t, err)
	require.Equal(t, op.EventRequireApproval, r.Initial)
}

func TestReadWithoutTemplateKeyedByHash(t *testing.T) {
	t.Parallel()
	tool, err := loadExample(t).Tool("get_account_status")
	require.NoError(t, err)
	a, err := tool.Prepare(registry.Proposal{WorkflowID: "wf", Args: []byte(`{"account_id":"acct_1"}`)})
	require.NoError(t, err)
	require.Equal(t, "get_account_status:"+a.Operation.ArgsHash+":v1", a.Operation.IdempotencyKey)
}

func TestLoadReportsEveryProblem(t *testing.T) {
	t.Parallel()
	bad := `
version: 1
tools:
  pay:
    side_effect_class: external_sometimes
    version: 0
    key_template: "pay:{order}"
    args_schema: {type: object, properties: {order_id: {type: string}}}
    timeout: fast
    retry: {max_attempts: 0, jitter: 2}
    lease: {required: true}
    approval: {when: sometimes}
    adapter: {type: http, vendor: nowhere, path: v1/pay}
    compensation: {tool: unpay}
  mail:
    side_effect_class: external_non_idempotent
    version: 1
    key_template: "mail:{to}"
    args_schema: {type: object, properties: {to: {type: string}}}
    adapter: {type: http, vendor: email, path: /v1/messages}
  "Bad Name":
    side_effect_class: pure_read
`
	_, err := registry.Load([]byte(bad), registry.Options{Vendors: map[string]string{"email": "http://127.0.0.1:9"}})
	var le *registry.LoadError
	require.True(t, errors.As(err, &le), "%v", err)
	require.ErrorIs(t, err, op.ErrInvalid)
	want := []string{
		"tool pay: side_effect_class:", "tool pay: version:", "tool pay: key_template: placeholder {order}",
		"tool pay: timeout:", "tool pay: retry.max_attempts:", "tool pay: retry.jitter:", "tool pay: lease.required:",
		"tool pay: approval.when:", "tool pay: adapter.vendor:", "tool pay: adapter.path:", "tool pay: compensation.tool:",
		"tool mail: adapter.lookup:", "tool Bad Name:",
	}
	msg := err.Error()
	for _, w := range want {
		require.Contains(t, msg, w)
	}
	require.Len(t, le.Problems, len(want), msg)
}

func TestLoadRejectsUnknownFieldsAndBadYAML(t *testing.T) {
	t.Parallel()
	_, err := registry.Load([]byte("version: 1\ntools:\n  x:\n    side_efect_class: pure_read\n"), vendors)
	require.ErrorIs(t, err, op.ErrInvalid)
	require.True(t, strings.Contains(err.Error(), "side_efect_class"), err.Error())
	_, err = registry.Load([]byte("version: [1"), vendors)
	require.ErrorIs(t, err, op.ErrInvalid)
	_, err = registry.Load([]byte("version: 2\ntools: {}\n"), vendors)
	require.ErrorContains(t, err, "version: must be 1")
}

// The registry never reads the environment: vendor URLs come from the
// program's edge, through Options.Vendors or Options.VendorURL.
func TestVendorURLFromTheEdge(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../examples/registry.yaml")
	require.NoError(t, err)
	_, err = registry.Load(data, registry.Options{})
	require.ErrorContains(t, err, "OPLEDGER_VENDOR_PAYMENTS_URL")
	asked := map[string]bool{}
	_, err = registry.Load(data, registry.Options{VendorURL: func(name string) (string, bool) {
		asked[name] = true
		return "http://127.0.0.1:9", true
	}})
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"payments": true, "email": true, "tickets": true, "crm": true, "accounts": true}, asked)
}

func TestExampleLookupStatusValues(t *testing.T) {
	t.Parallel()
	reg := loadExample(t)
	for tool, succeeded := range map[string][]string{
		"capture_payment": {"succeeded"}, "refund_payment": {"succeeded"}, "credit_account": {"applied"},
		"send_email": {"queued", "delivered"}, "create_ticket": {"open"},
	} {
		tl, err := reg.Tool(tool)
		require.NoError(t, err)
		l := tl.Adapter.HTTP.Lookup
		require.NotNil(t, l, tool)
		require.Equal(t, "/status", l.StatusPointer, tool)
		require.Equal(t, succeeded, l.SucceededValues, tool)
		require.Empty(t, l.FailedValues, tool)
		require.Empty(t, l.PendingValues, tool)
	}
}

// TestExampleLookupsAgainstVendors runs each example tool's call and lookup
// against the local vendors: the configured status values must be the ones
// the vendors really answer.
func TestExampleLookupsAgainstVendors(t *testing.T) {
	t.Parallel()
	v, err := vendorsim.Start(vendorsim.Options{})
	require.NoError(t, err)
	t.Cleanup(v.Close)
	data, err := os.ReadFile("../../examples/registry.yaml")
	require.NoError(t, err)
	opts := registry.Options{Vendors: map[string]string{}}
	for _, name := range []string{"payments", "email", "tickets", "crm", "accounts"} {
		opts.Vendors[name] = v.URL()
	}
	reg, err := registry.Load(data, opts)
	require.NoError(t, err)

	ctx := context.Background()
	run := func(tool, args string) adapter.LookupResult {
		t.Helper()
		tl, err := reg.Tool(tool)
		require.NoError(t, err)
		p, err := tl.Prepare(registry.Proposal{WorkflowID: "wf", Args: []byte(args)})
		require.NoError(t, err)
		a, err := httpadapter.New(tl.Adapter.HTTP, nil)
		require.NoError(t, err)
		req := adapter.Request{OperationID: op.NewID("op"), Tool: tool, IdempotencyKey: p.Operation.IdempotencyKey, Args: p.Operation.Args}
		lr, err := a.Lookup(ctx, req)
		require.NoError(t, err, tool)
		require.False(t, lr.Found, tool)
		res := a.Call(ctx, req)
		require.Equal(t, op.OutcomeSuccess, res.Outcome, "%s: %s", tool, res.Error)
		lr, err = a.Lookup(ctx, req)
		require.NoError(t, err, tool)
		require.Equal(t, adapter.LookupResult{Found: true, Outcome: op.OutcomeSuccess, ExternalObjectID: res.ExternalObjectID,
			HTTPStatus: 200}, lr, tool)
		return lr
	}
	ch := run("capture_payment", `{"order_id":"o1","customer_id":"c1","amount_cents":4900,"currency":"USD"}`)
	run("refund_payment", `{"charge_id":"`+ch.ExternalObjectID+`","customer_id":"c1","amount_cents":100}`)
	run("credit_account", `{"customer_id":"c1","offer_id":"winback_1","amount_cents":500,"reason":"stay with us"}`)
	run("send_email", `{"to":"a@example.com","template":"payment_receipt","reference":"o1"}`)
	run("create_ticket", `{"conversation_id":"conv1","queue":"billing","summary":"refund please"}`)
}

func TestLoadLookupStatusValues(t *testing.T) {
	t.Parallel()
	const tmpl = `
version: 1
tools:
  pay:
    side_effect_class: external_irreversible
    version: 1
    key_template: "pay:{order_id}"
    args_schema: {type: object, properties: {order_id: {type: string}}}
    approval: {when: always}
    adapter:
      type: http
      vendor: payments
      path: /v1/pay
      lookup:
        path: "/v1/pay?key={idempotency_key}"
        external_id_pointer: /id
%s`
	opts := registry.Options{Vendors: map[string]string{"payments": "http://127.0.0.1:9"}}

	reg, err := registry.Load([]byte(fmt.Sprintf(tmpl, `        status_pointer: /status
        pending_values: [pending]
        failed_values: [failed, canceled]
        succeeded_values: [succeeded]
`)), opts)
	require.NoError(t, err)
	tl, err := reg.Tool("pay")
	require.NoError(t, err)
	l := tl.Adapter.HTTP.Lookup
	require.Equal(t, []string{"pending"}, l.PendingValues)
	require.Equal(t, []string{"failed", "canceled"}, l.FailedValues)
	require.Equal(t, []string{"succeeded"}, l.SucceededValues)

	for name, tc := range map[string]struct {
		lookup string
		want   []string
	}{
		"lists without status_pointer": {`        failed_values: [failed]
        succeeded_values: [succeeded]
`, []string{
			"tool pay: adapter.lookup.failed_values: needs adapter.lookup.status_pointer",
			"tool pay: adapter.lookup.succeeded_values: needs adapter.lookup.status_pointer",
		}},
		"overlapping lists": {`        status_pointer: /status
        pending_values: [pending]
        failed_values: [failed, pending]
        succeeded_values: [succeeded, failed]
`, []string{
			`tool pay: adapter.lookup.failed_values: "pending" is also in adapter.lookup.pending_values`,
			`tool pay: adapter.lookup.succeeded_values: "failed" is also in adapter.lookup.failed_values`,
		}},
		"empty value": {`        status_pointer: /status
        succeeded_values: [""]
`, []string{"tool pay: adapter.lookup.succeeded_values: contains an empty value"}},
		"bad status_pointer": {`        status_pointer: status
`, []string{`tool pay: adapter.lookup.status_pointer: JSON pointer must start with "/"`}},
	} {
		_, err := registry.Load([]byte(fmt.Sprintf(tmpl, tc.lookup)), opts)
		var le *registry.LoadError
		require.True(t, errors.As(err, &le), "%s: %v", name, err)
		require.ErrorIs(t, err, op.ErrInvalid)
		msg := err.Error()
		for _, w := range tc.want {
			require.Contains(t, msg, w, name)
		}
		require.Len(t, le.Problems, len(tc.want), "%s: each problem once, under its own field: %s", name, msg)
	}
}
