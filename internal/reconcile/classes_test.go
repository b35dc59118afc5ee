package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// classScale divides every duration of TestEveryClassEveryLatency: the
// tools' timeouts, apply bounds, retry backoffs and reconciliation
// schedule, the reconciler's settle delay and the vendor's latencies, all
// together, so that the run is the real one at a twentieth of its length.
// Only what opledger does not decide stays at full speed (a local vendor
// answering in a millisecond, a Postgres commit), which makes the scaled run
// harder on it, not easier.
const classScale = 20

// classRegistry is a tool of every side-effect class, with its durations as
// they would be written for a real vendor (a 2 s timeout, a mail vendor
// that promises to apply a request within 90 s, the loader's default bound
// of 5 minutes for an irreversible tool without an idempotency key) and
// every duration divided by scale. The class decides what an ambiguous
// outcome may lead to: a read, an internal write and a write the vendor
// dedupes by our key may be sent again; the rest are reconciled and never
// sent again while the vendor may still apply the first request.
func classRegistry(scale time.Duration) string {
	d := func(full time.Duration) string { return (full / scale).String() }
	// Tools without a lookup take no reconciliation schedule: the
	// reconciler decides for them at once.
	common := fmt.Sprintf(`    version: 1
    timeout: %s
    retry: {max_attempts: 5, initial_backoff: %s, max_backoff: %s, max_elapsed: %s}
`, d(2*time.Second), d(200*time.Millisecond), d(10*time.Second), d(10*time.Minute))
	looked := common + fmt.Sprintf("    reconcile: {max_lookups: 20, interval: %s, deadline: %s}\n", d(10*time.Second), d(10*time.Minute))
	emailLookup := `      lookup:
        path: "/v1/messages?client_reference={idempotency_key}"
        external_id_pointer: /id
        status_pointer: /status
        succeeded_values: [queued, delivered]
`
	irreversibleBound := ""
	if scale > 1 {
		// The default, scaled: the unscaled registry leaves it out (and so
		// gets registry.DefaultApplyBound, which the test checks).
		irreversibleBound = "    apply_bound: " + d(registry.DefaultApplyBound) + "\n"
	}
	return `version: 1
tools:
  class_pure_read:
    side_effect_class: pure_read
` + common + `    args_schema: {type: object, additionalProperties: false, required: [account_id], properties: {account_id: {type: string}}}
    adapter: {type: http, vendor: accounts, method: GET, path: "/v1/accounts/{account_id}", external_id_pointer: /id}

  class_internal_write:
    # A write inside our own boundary, keyed by the idempotency key (as a
    # table with the key unique is): sent again at once after ambiguity.
    side_effect_class: internal_write
    key_template: "credit:{account_id}"
` + common + `    args_schema: {type: object, additionalProperties: false, required: [account_id, amount_cents], properties: {account_id: {type: string}, amount_cents: {type: integer}}}
    adapter:
      type: http
      vendor: accounts
      path: "/v1/accounts/{account_id}/credits"
      idempotency_header: Idempotency-Key
      body: {fields: {amount_cents: "{amount_cents}", reason: "class"}}
      external_id_pointer: /id

  class_external_idempotent:
    side_effect_class: external_idempotent
    key_template: "ticket:{conversation_id}"
` + looked + `    args_schema: {type: object, additionalProperties: false, required: [conversation_id], properties: {conversation_id: {type: string}, queue: {type: string, default: billing}, summary: {type: string, default: s}}}
    adapter:
      type: http
      vendor: tickets
      path: /v1/tickets
      idempotency_header: Idempotency-Key
      external_id_pointer: /id
      lookup: {path: "/v1/tickets?idempotency_key={idempotency_key}", external_id_pointer: /id}

  class_external_idempotent_no_lookup:
    # Nothing to ask: the vendor's dedupe by our key makes sending again safe.
    side_effect_class: external_idempotent
    key_template: "ticket:{conversation_id}"
` + common + `    args_schema: {type: object, additionalProperties: false, required: [conversation_id], properties: {conversation_id: {type: string}, queue: {type: string, default: billing}, summary: {type: string, default: s}}}
    adapter: {type: http, vendor: tickets, path: /v1/tickets, idempotency_header: Idempotency-Key, external_id_pointer: /id}

  class_external_non_idempotent:
    side_effect_class: external_non_idempotent
    key_template: "email:{to}"
` + looked + `    apply_bound: ` + d(90*time.Second) + `
    args_schema: {type: object, additionalProperties: false, required: [to], properties: {to: {type: string}, template: {type: string, default: payment_receipt}, reference: {type: string, default: r}}}
    adapter:
      type: http
      vendor: email
      path: /v1/messages
      reference_header: X-Client-Reference
      external_id_pointer: /id
      status_outcomes: {"202": success}
` + emailLookup + `
  class_external_irreversible_keyed:
    side_effect_class: external_irreversible
    key_template: "payment:{order_id}"
    approval: {when: never}
` + looked + `    args_schema: {type: object, additionalProperties: false, required: [order_id], properties: {order_id: {type: string}, customer_id: {type: string, default: c}, amount_cents: {type: integer, default: 4900}, currency: {type: string, default: USD}}}
    adapter:
      type: http
      vendor: payments
      path: /v1/payments/capture
      idempotency_header: Idempotency-Key
      external_id_pointer: /id
      lookup: {path: "/v1/payments?idempotency_key={idempotency_key}", external_id_pointer: /id}

  class_external_irreversible_unkeyed:
    # No idempotency key and no apply_bound of its own: the 5 minute default.
    side_effect_class: external_irreversible
    key_template: "notice:{to}"
    approval: {when: never}
` + looked + irreversibleBound + `    args_schema: {type: object, additionalProperties: false, required: [to], properties: {to: {type: string}, template: {type: string, default: payment_receipt}, reference: {type: string, default: r}}}
    adapter:
      type: http
      vendor: email
      path: /v1/messages
      reference_header: X-Client-Reference
      external_id_pointer: /id
      status_outcomes: {"202": success}
` + emailLookup
}

// Issue 8.1: a vendor that takes anything from nothing to a minute must
// never make a second effect, whatever the class. For a tool of every class
// (and the irreversible tool without an idempotency key, which gets the
// default 5 minute apply bound), calls whose vendor takes 0, 1, 2 (the
// timeout), 3, 7 (issue 8.1's slow mail vendor), 20 and 60 s to apply them
// (scaled, see classScale): each operation completes and its vendor holds
// exactly one effect, counted once the vendor has finished every request it
// was sent.
//
// Breaking it: an apply bound of nothing for the mail tool (trusting the
// lookup's "not found" after the settle delay alone) sends the email again
// while the first one is still at the vendor, from the 3 s latency on.
func TestEveryClassEveryLatency(t *testing.T) {
	t.Parallel()
	unscaled, err := registry.Load([]byte(classRegistry(1)), registry.Options{VendorURL: func(string) (string, bool) { return "http://127.0.0.1:9", true }})
	require.NoError(t, err)
	unkeyed, err := unscaled.Tool("class_external_irreversible_unkeyed")
	require.NoError(t, err)
	require.Equal(t, registry.DefaultApplyBound, unkeyed.ApplyBound, "unscaled, the unkeyed irreversible tool has the default bound")
	mail, err := unscaled.Tool("class_external_non_idempotent")
	require.NoError(t, err)
	require.Equal(t, 90*time.Second, mail.ApplyBound)

	latencies := []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second, 7 * time.Second, 20 * time.Second, time.Minute}
	classes := []struct {
		tool, route, kind string
		args              func(i int) string
	}{
		{"class_pure_read", vendors.RouteAccount, "", func(i int) string { return fmt.Sprintf(`{"account_id":"acct_%d"}`, i) }},
		{"class_internal_write", vendors.RouteCredit, vendors.KindCredit, func(i int) string {
			return fmt.Sprintf(`{"account_id":"acct_%d","amount_cents":100}`, i)
		}},
		{"class_external_idempotent", vendors.RouteTicket, vendors.KindTicket, func(i int) string { return fmt.Sprintf(`{"conversation_id":"conv_%d"}`, i) }},
		{"class_external_idempotent_no_lookup", vendors.RouteTicket, vendors.KindTicket, func(i int) string { return fmt.Sprintf(`{"conversation_id":"conv_%d"}`, i) }},
		{"class_external_non_idempotent", vendors.RouteEmail, vendors.KindEmail, func(i int) string { return fmt.Sprintf(`{"to":"c_%d@example.com"}`, i) }},
		{"class_external_irreversible_keyed", vendors.RouteCapture, vendors.KindCapture, func(i int) string { return fmt.Sprintf(`{"order_id":"ord_%d"}`, i) }},
		{"class_external_irreversible_unkeyed", vendors.RouteEmail, vendors.KindEmail, func(i int) string { return fmt.Sprintf(`{"to":"c_%d@example.com"}`, i) }},
	}
	scaled := classRegistry(classScale)
	for _, c := range classes {
		t.Run(strings.TrimPrefix(c.tool, "class_"), func(t *testing.T) {
			t.Parallel()
			e := pipetest.Start(t, pipetest.Options{ToolTimeout: 2 * time.Second / classScale, ShippedApplyBound: true,
				EditRegistry: func([]byte) ([]byte, error) { return []byte(scaled), nil }})
			tool := e.Tool(t, c.tool)
			d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
			rc := reconcile.New(reconcile.Config{Name: "reconciler-1", SettleDelay: 2 * time.Second / classScale},
				e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
			for i, full := range latencies {
				lat := full / classScale
				if lat > 0 {
					require.NoError(t, e.Vendors.InjectFault(vendors.Fault{Route: c.route, Kind: vendors.FaultLatency, Delay: lat, Times: 1}))
				}
				o := e.Submit(t, wire.Intent{EventID: fmt.Sprintf("evt_%d", i), WorkflowID: "wf_1", Tool: c.tool, Args: json.RawMessage(c.args(i))})
				o = drive(t, e, d, rc, o)
				require.Equal(t, op.StateCompletedSuccess, o.State, "vendor taking %s (timeout %s, apply bound %s): %s", full, tool.Timeout*classScale, tool.ApplyBound*classScale, o.LastError)
				ctx, cancel := context.WithTimeout(e.Ctx, 10*time.Second)
				require.NoError(t, e.Vendors.WaitIdle(ctx), "the vendor finished every request it was sent")
				cancel()
				if c.kind == "" {
					continue // a read has no effect to count
				}
				effects := e.Vendors.EffectsByKey(c.kind)
				require.Len(t, effects, i+1, "vendor taking %s: one effect per operation", full)
				for key, n := range effects {
					require.Equal(t, 1, n, "vendor taking %s: %s applied %d times", full, key, n)
				}
			}
		})
	}
}
