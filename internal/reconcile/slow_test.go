package reconcile_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// drive runs an operation to rest with a dispatcher and a reconciler, the
// way their consumers would, until it settles or a person owns it.
func drive(t *testing.T, e *pipetest.Env, d *dispatch.Service, rc *reconcile.Service, o *op.Operation) *op.Operation {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		o = e.Operation(t, o.ID)
		switch o.State {
		case op.StatePendingDispatch:
			if err := d.Handle(e.Ctx, e.LastCommand(t, o, wire.KindDispatch).Delivery(1)); err != nil {
				// A claim that outlived the tool's timeout (a loaded machine)
				// is given back: look again, as a redelivery would.
				t.Logf("dispatch of %s: %v; again", o.ID, err)
				time.Sleep(50 * time.Millisecond)
			}
		case op.StateUnknownOutcome, op.StateAcknowledged:
			if err := rc.Handle(e.Ctx, e.LastCommand(t, o, wire.KindUnknown).Delivery(1)); err != nil {
				time.Sleep(50 * time.Millisecond) // look again, as a redelivery would
			}
		case op.StateDispatched:
			time.Sleep(20 * time.Millisecond)
		default:
			return o
		}
	}
	t.Fatalf("operation %s still %s after 30s", o.ID, o.State)
	return nil
}

// A slow vendor must not get a second request. The vendor takes longer
// than the tool's timeout (500 ms here) to apply a request; the call ends
// unknown, and the lookup finds nothing while the vendor is still at work.
// A "not found" is evidence only once the request can no longer take
// effect: after the tool's apply bound (2 s here for tools whose vendor
// does not deduplicate by our key; none for those that do, which may be
// sent again sooner) and the settle delay. Every tool of the example
// registry, every class, vendor latencies from none to just inside the
// bound: one effect each. (Scaled: the shipped default bound is 5 minutes,
// against which latencies of a minute are the same test.)
//
// Breaking it: trusting "not found" after the settle delay alone, as the
// reconciler did, sends the email twice for latencies between the timeout
// and the bound.
func TestSlowVendorNeverGetsASecondRequest(t *testing.T) {
	t.Parallel()
	type tool struct {
		name, route, kind string
		args              func(i int) string
	}
	tools := []tool{
		{"capture_payment", vendors.RouteCapture, vendors.KindCapture, func(i int) string {
			return fmt.Sprintf(`{"order_id":"slow_%d","customer_id":"c","amount_cents":4900,"currency":"USD"}`, i)
		}},
		{"create_payment_intent", vendors.RoutePaymentIntent, vendors.KindPaymentIntent, func(i int) string {
			return fmt.Sprintf(`{"order_id":"slow_%d","customer_id":"c","amount_cents":4900,"currency":"usd"}`, i)
		}},
		{"send_email", vendors.RouteEmail, vendors.KindEmail, func(i int) string {
			return fmt.Sprintf(`{"to":"slow_%d@example.com","template":"payment_receipt","reference":"r_%d"}`, i, i)
		}},
		{"create_ticket", vendors.RouteTicket, vendors.KindTicket, func(i int) string {
			return fmt.Sprintf(`{"conversation_id":"slow_%d","queue":"billing","summary":"s"}`, i)
		}},
		{"update_crm_record", vendors.RouteCRM, vendors.KindCRM, func(i int) string {
			return fmt.Sprintf(`{"record_id":"slow_%d","field":"status","value":"active"}`, i)
		}},
		{"get_account_status", vendors.RouteAccount, "", func(i int) string { return fmt.Sprintf(`{"account_id":"slow_%d"}`, i) }},
	}
	latencies := []time.Duration{0, 300 * time.Millisecond, 900 * time.Millisecond, 1800 * time.Millisecond}
	for _, tl := range tools {
		t.Run(tl.name, func(t *testing.T) {
			t.Parallel()
			e := pipetest.Start(t, pipetest.Options{})
			d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
			rc := reconcile.New(reconcile.Config{Name: "reconciler-1", SettleDelay: settleDelay}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
			for i, lat := range latencies {
				if lat > 0 {
					require.NoError(t, e.Vendors.InjectFault(vendors.Fault{Route: tl.route, Kind: vendors.FaultLatency, Delay: lat}))
				}
				o := e.Submit(t, wire.Intent{EventID: fmt.Sprintf("evt_%s_%d", tl.name, i), WorkflowID: "wf_1", Tool: tl.name,
					Args: json.RawMessage(tl.args(i))})
				o = drive(t, e, d, rc, o)
				require.Equal(t, op.StateCompletedSuccess, o.State, "latency %s: %s", lat, o.LastError)
				time.Sleep(lat) // any request still at the vendor has been applied by now
				if tl.kind == "" {
					continue // a read has no effect to count
				}
				for key, n := range e.Vendors.EffectsByKey(tl.kind) {
					require.Equal(t, 1, n, "latency %s: %s applied %d times", lat, key, n)
				}
				require.Len(t, e.Vendors.EffectsByKey(tl.kind), i+1)
			}
		})
	}
}

// The same at full scale, with the bounds the example registry ships
// (send_email: its vendor promises to apply a request within 90 s; the
// others dedupe by our key and may be sent again at once): every tool with
// an effect, vendors taking 60 s to apply (shorter latencies: the test above) a request whose call
// timed out after half a second. Each operation is driven the way
// redeliveries would, every half second, until it settles; the vendor then
// holds exactly one effect.
//
// Breaking it: a bound shorter than the vendor's latency (or none) sends the
// email again while the first request is still at the vendor: two emails.
func TestSlowVendorUpToAMinute(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("takes about 100 s; runs in the full suite")
	}
	type tool struct {
		name, route, kind, args string
	}
	tools := []tool{
		{"capture_payment", vendors.RouteCapture, vendors.KindCapture, `{"order_id":"slow_min","customer_id":"c","amount_cents":4900,"currency":"USD"}`},
		{"create_payment_intent", vendors.RoutePaymentIntent, vendors.KindPaymentIntent, `{"order_id":"slow_min","customer_id":"c","amount_cents":4900,"currency":"usd"}`},
		{"send_email", vendors.RouteEmail, vendors.KindEmail, `{"to":"slow_min@example.com","template":"payment_receipt","reference":"r_min"}`},
		{"create_ticket", vendors.RouteTicket, vendors.KindTicket, `{"conversation_id":"slow_min","queue":"billing","summary":"s"}`},
		{"update_crm_record", vendors.RouteCRM, vendors.KindCRM, `{"record_id":"slow_min","field":"status","value":"active"}`},
	}
	for _, tl := range tools {
		for _, lat := range []time.Duration{60 * time.Second} {
			t.Run(fmt.Sprintf("%s_%s", tl.name, lat), func(t *testing.T) {
				t.Parallel()
				e := pipetest.Start(t, pipetest.Options{ShippedApplyBound: true})
				tool := e.Tool(t, tl.name)
				require.True(t, tool.Adapter.VendorIdempotency || tool.ApplyBound > lat,
					"%s: the shipped bound (%s) must cover a vendor taking %s", tl.name, tool.ApplyBound, lat)
				d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
				rc := reconcile.New(reconcile.Config{Name: "reconciler-1", SettleDelay: settleDelay}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
				require.NoError(t, e.Vendors.InjectFault(vendors.Fault{Route: tl.route, Kind: vendors.FaultLatency, Delay: lat}))
				o := e.Submit(t, wire.Intent{EventID: "evt_" + tl.name, WorkflowID: "wf_1", Tool: tl.name, Args: json.RawMessage(tl.args)})
				deadline := time.Now().Add(lat + tool.ApplyBound + 30*time.Second)
				for n := 1; !o.State.Terminal() && time.Now().Before(deadline); n++ {
					switch o.State {
					case op.StatePendingDispatch:
						require.NoError(t, d.Handle(e.Ctx, e.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
					case op.StateUnknownOutcome, op.StateAcknowledged:
						_ = rc.Handle(e.Ctx, e.LastCommand(t, o, wire.KindUnknown).Delivery(uint64(min(n, 2))))
						time.Sleep(500 * time.Millisecond)
					default:
						time.Sleep(100 * time.Millisecond)
					}
					o = e.Operation(t, o.ID)
				}
				require.Equal(t, op.StateCompletedSuccess, o.State, "%s: %s", o.State, o.LastError)
				time.Sleep(time.Until(o.CreatedAt.Add(lat + 2*time.Second))) // every request sent has been applied by now
				effects := e.Vendors.EffectsByKey(tl.kind)
				require.Len(t, effects, 1, "%v", effects)
				for key, n := range effects {
					require.Equal(t, 1, n, "%s applied %d times", key, n)
				}
			})
		}
	}
}
