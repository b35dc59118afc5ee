package natsauth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testlog"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The whole pipeline runs on the shipped configuration, each service as its
// own user with only its permissions, as separate processes would (one
// StartServices each, with its own NATS connections and outbox relay), and
// agents of three tenants get their operations done, an unknown outcome
// included (dispatcher → reconciler), and a permanent failure reaches the
// compensator. Breaking it: a permission a service
// needs missing from nats.conf (its consumer is never created, its relay's
// publishes are refused, or a reply never reaches its inbox), which the
// server also reports and the services log as "nats error".
func TestPipelineWithServicesAsTheirUsers(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	dbURL := testdb.New(t)
	vs, err := vendors.Start(vendors.Options{})
	require.NoError(t, err)
	t.Cleanup(vs.Close)
	reg := pipetest.LoadRegistry(t, vs.URL(), pipetest.DefaultToolTimeout)
	logs := &testlog.Buffer{}
	log := zerolog.New(logs).Level(zerolog.WarnLevel)

	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var running []*app.Services
	for _, name := range app.AllServices {
		svc, err := app.StartServices(c, app.ServicesConfig{
			DatabaseURL: dbURL, NATSURL: s.url, NATSAuth: s.serviceAuth(name), Registry: reg, Run: []string{name},
			Instance: "it-" + name, DBMaxConns: 4,
			Reconcile: reconcile.Config{SettleDelay: 300 * time.Millisecond},
			Maintain:  maintain.Config{SweepInterval: 200 * time.Millisecond, ElectInterval: 100 * time.Millisecond},
			Log:       log,
		})
		require.NoError(t, err, "start %s as its NATS user", name)
		running = append(running, svc)
	}
	t.Cleanup(func() {
		for i := len(running) - 1; i >= 0; i-- {
			running[i].Stop()
		}
	})
	for _, svc := range running {
		for _, ch := range svc.Ready(c) {
			require.True(t, ch.OK, "%s: %s", ch.Name, ch.Detail)
		}
	}

	// One capture of each tenant is answered ambiguously by the vendor (the
	// charge happens, the answer is lost): dispatcher → unknown_outcome →
	// reconciler, each through its own consumer.
	require.NoError(t, vs.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultTimeoutAfterCommit, Times: 3}))

	tenants := []string{"acme", "globex", "default"}
	agents := map[string]*client.Client{}
	for _, tn := range tenants {
		agents[tn] = s.agent(t, tn)
		require.NoError(t, agents[tn].EnsureResultsStream(c, 0))
	}
	const perTenant = 4
	var wg sync.WaitGroup
	results := make(map[string][]client.Result)
	var mu sync.Mutex
	for _, tn := range tenants {
		for i := range perTenant {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The same order id in every tenant: keys are per tenant.
				in := wire.Intent{EventID: fmt.Sprintf("conv_1:call_%d", i), WorkflowID: "wf_1", Tool: "capture_payment",
					Args: json.RawMessage(fmt.Sprintf(`{"order_id":"order_%d","customer_id":"cust_1","amount_cents":4900,"currency":"USD"}`, i))}
				r, err := agents[tn].SubmitAndWait(c, in)
				if !(err == nil) {
					t.Errorf("%s %s: %v", tn, in.EventID, err)
					return
				}
				mu.Lock()
				results[tn] = append(results[tn], r)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	for _, tn := range tenants {
		require.Len(t, results[tn], perTenant, tn)
		for _, r := range results[tn] {
			require.Equal(t, string(op.StateCompletedSuccess), string(r.Status), "%s %s: %s", tn, r.EventID, r.Reason)
			require.Equal(t, wire.ResultTenant(tn), r.Tenant)
		}
	}
	require.Equal(t, 3*perTenant, vs.Stats().Captures, "one charge per tenant's order")
	require.Positive(t, vs.Stats().FaultsFired, "the ambiguous answers happened")

	// An email the vendor refuses (4xx) fails for good: a failed command
	// for the compensator, which takes it off OPS with its own ack.
	require.NoError(t, vs.InjectFault(vendors.Fault{Route: vendors.RouteEmail, Kind: vendors.FaultClientError, Times: 1}))
	r, err := agents["acme"].SubmitAndWait(c, wire.Intent{EventID: "conv_1:call_mail", WorkflowID: "wf_1", Tool: "send_email",
		Args: json.RawMessage(`{"to":"user1@example.com","template":"payment_receipt","reference":"order_0"}`)})
	require.NoError(t, err)
	require.Equal(t, string(op.StateFailedPermanent), string(r.Status), r.Reason)
	ops := s.serviceJS(t, "compensator")
	require.Eventually(t, func() bool {
		st, err := ops.Stream(c, wire.StreamOps)
		if err != nil {
			return false
		}
		info, err := st.Info(c, jetstream.WithSubjectFilter(wire.OpsFilter(wire.KindFailed)))
		return err == nil && info.State.Msgs == 0 && len(info.State.Subjects) == 0
	}, 20*time.Second, 50*time.Millisecond, "the compensator acked the failed command")

	// Each tenant's stream holds its own results and no one else's.
	for _, tn := range tenants {
		wctx, wcancel := context.WithTimeout(c, 5*time.Second)
		ch, err := agents[tn].Watch(wctx, agents[tn].AllResults())
		require.NoError(t, err)
		final := 0
		for final < perTenant {
			r, ok := <-ch
			require.True(t, ok, "%s: %d of %d final results before the watch ended", tn, final, perTenant)
			require.Equal(t, wire.ResultTenant(tn), r.Tenant, "%s read a result of another tenant", tn)
			if r.Final && r.Tool == "capture_payment" {
				final++
			}
		}
		wcancel()
	}
	// And holds nothing of another tenant, checked by its subjects.
	for _, tn := range tenants {
		js, err := jetstream.New(s.raw(t, "agent-"+tn, client.InboxPrefix(tn)).nc)
		require.NoError(t, err)
		st, err := js.Stream(c, wire.StreamResults)
		require.NoError(t, err)
		info, err := st.Info(c, jetstream.WithSubjectFilter(">"))
		require.NoError(t, err)
		require.NotEmpty(t, info.State.Subjects)
		for subj := range info.State.Subjects {
			require.Equal(t, wire.TenantResultSubject(tn, "wf_1"), subj, "%s's results stream", tn)
		}
	}
	require.NotContains(t, logs.String(), "ermissions violation", "no service was refused anything it needed")
	require.NotContains(t, logs.String(), "nats error")
}
