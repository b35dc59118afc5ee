package natsauth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// withStreams connects planner-ingest, as a service process does at start,
// and makes the streams. It returns the service's bus.
func (s *server) withStreams(t *testing.T) *bus.Bus {
	t.Helper()
	b, err := bus.ConnectAuth(ctx(t), s.url, t.Name()+"/planner-ingest", s.serviceAuth("planner-ingest"), zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(b.Close)
	require.NoError(t, b.EnsureStreams(ctx(t), bus.StreamOptions{Memory: true}))
	return b
}

// Without credentials, with a wrong password, or with a password for
// another user, the server refuses the connection. Breaking it: a
// no_auth_user, or a user without a password, in nats.conf.
func TestConnectionsNeedCredentials(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for name, opts := range map[string][]nats.Option{
		"none":                  nil,
		"wrong password":        {nats.UserInfo("agent-acme", "not-the-password")},
		"another user's secret": {nats.UserInfo("planner-ingest", s.secrets["agent-acme"])},
		"unknown user":          {nats.UserInfo("agent-initech", s.secrets["agent-acme"])},
		"a token":               {nats.Token(s.secrets["dispatcher"])},
	} {
		nc, err := nats.Connect(s.url, opts...)
		if err == nil {
			nc.Close()
		}
		require.True(t, isAuthError(err), "%s: want an authorization violation, got %v", name, err)
	}
	// The services' own way in works: a password file, read at connect.
	b, err := bus.ConnectAuth(ctx(t), s.url, "dispatcher", s.serviceAuth("dispatcher"), zerolog.Nop())
	require.NoError(t, err)
	b.Close()
	// And a refused one says so without the secret.
	bad := s.serviceAuth("dispatcher")
	bad.PasswordFile = ""
	bad.Password = "hunter2-canary"
	_, err = bus.ConnectAuth(ctx(t), "nats://dispatcher:hunter2-canary@"+s.url[len("nats://"):], "dispatcher", bus.Auth{}, zerolog.Nop())
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2-canary")
	require.Contains(t, err.Error(), "dispatcher:***@")
}

// An agent of tenant acme can do nothing beyond publishing acme's intents
// and reading acme's results. Each line below is a door it finds shut; a
// permission added to nats.conf that opens one makes that line fail.
func TestAgentDenials(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.withStreams(t)
	acme := s.raw(t, "agent-acme", client.InboxPrefix("acme"))

	for _, subject := range []string{
		// Other tenants' intents, and the default tenant's.
		"opledger.intents.globex.wf_1",
		"opledger.intents.wf_1",
		"opledger.intents.default.wf_1",
		// Forging results, even its own, and alerts.
		"opledger.results.acme.wf_1",
		"opledger.results.globex.wf_1",
		"opledger.alerts.payments",
		// Commands: dispatch, unknown, failed, completed.
		"opledger.ops.dispatch.capture_payment.op_1",
		"opledger.ops.unknown.capture_payment.op_1",
		"opledger.ops.failed.capture_payment.op_1",
		// Streams: no deleting, purging, reading by sequence, listing, or
		// making streams other than its own RESULTS.
		"$JS.API.STREAM.DELETE.RESULTS",
		"$JS.API.STREAM.PURGE.RESULTS",
		"$JS.API.STREAM.UPDATE.RESULTS",
		"$JS.API.STREAM.CREATE.INTENTS",
		"$JS.API.STREAM.CREATE.OPS",
		"$JS.API.STREAM.INFO.INTENTS",
		"$JS.API.STREAM.LIST",
		"$JS.API.STREAM.NAMES",
		"$JS.API.STREAM.MSG.GET.RESULTS",
		"$JS.API.DIRECT.GET.RESULTS",
		"$JS.API.STREAM.MSG.DELETE.RESULTS",
		"$JS.API.ACCOUNT.INFO",
		// Consumers: only single-filter ones on acme's results; no listing
		// (which would reveal names), no durable API, no consumers on
		// other streams or other tenants' results.
		"$JS.API.CONSUMER.CREATE.RESULTS.spy",
		"$JS.API.CONSUMER.CREATE.RESULTS.spy.opledger.results.>",
		"$JS.API.CONSUMER.CREATE.RESULTS.spy.opledger.results.globex.>",
		"$JS.API.CONSUMER.CREATE.RESULTS.spy.opledger.results.*",
		"$JS.API.CONSUMER.DURABLE.CREATE.RESULTS.spy",
		"$JS.API.CONSUMER.LIST.RESULTS",
		"$JS.API.CONSUMER.NAMES.RESULTS",
		"$JS.API.CONSUMER.CREATE.INTENTS.spy.opledger.intents.>",
		"$JS.API.CONSUMER.INFO.INTENTS.planner-ingest",
		"$JS.API.CONSUMER.MSG.NEXT.INTENTS.planner-ingest",
		"$JS.API.CONSUMER.MSG.NEXT.OPS.dispatcher",
		"$JS.API.CONSUMER.DELETE.OPS.dispatcher",
		"$JS.ACK.OPS.dispatcher.1.1.1.1.1.1",
		// Another inbox's replies cannot be forged either.
		"_INBOX_globex.abc",
		"_INBOX_SVC.dispatcher.abc",
	} {
		acme.deniedPublish(t, subject)
	}
	for _, subject := range []string{
		"opledger.results.>",
		"opledger.results.globex.>",
		"opledger.intents.>",
		"opledger.ops.>",
		"opledger.alerts.>",
		">",
		"$JS.>",
		"$JS.EVENT.>",
		"_INBOX.>",
		"_INBOX_globex.>",
		"_INBOX_SVC.>",
		"_INBOX_SVC.planner-ingest.>",
	} {
		acme.deniedSubscribe(t, subject)
	}
}

// The doors that are open to an agent lead only to its own tenant: acme's
// client publishes acme's intents (JetStream acknowledges them from the
// services' INTENTS stream) and reads acme's results and nothing else, even
// when it names another tenant's consumer. Breaking it: an export of
// opledger.results.> to ACME, or a permission naming another tenant's
// subjects, makes globex's result reach acme.
func TestAgentSeesOnlyItsTenant(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	svc := s.withStreams(t)
	c := ctx(t)

	acme, globex, def := s.agent(t, "acme"), s.agent(t, "globex"), s.agent(t, "default")
	for _, a := range []*client.Client{acme, globex, def} {
		require.NoError(t, a.EnsureResultsStream(c, 0))
	}
	// Publishing an intent is allowed, and the services' stream stores it.
	for i, a := range []*client.Client{acme, globex, def} {
		require.NoError(t, a.Publish(c, wire.Intent{EventID: "evt_" + string(rune('a'+i)), WorkflowID: "wf_1", Tool: "capture_payment",
			Args: json.RawMessage(`{}`)}, ""))
	}
	js, err := jetstream.New(svc.Conn())
	require.NoError(t, err)
	st, err := js.Stream(c, wire.StreamIntents)
	require.NoError(t, err)
	info, err := st.Info(c, jetstream.WithSubjectFilter(">"))
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{"opledger.intents.acme.wf_1": 1, "opledger.intents.globex.wf_1": 1, "opledger.intents.wf_1": 1},
		info.State.Subjects, "each intent on its tenant's subject")

	// The services publish one result per tenant (as the relay does).
	for _, tenant := range []string{"globex", "default", "acme"} {
		r := wire.Result{Spec: wire.SpecResult, Tenant: wire.ResultTenant(tenant), OperationID: "op_" + tenant, EventID: "evt_" + tenant,
			WorkflowID: "wf_1", Tool: "capture_payment", Status: string(op.StateCompletedSuccess), DedupeDecision: op.DecisionNew,
			Final: true, Version: 1, At: time.Now().UTC()}
		data, err := json.Marshal(r)
		require.NoError(t, err)
		_, err = svc.Publish(c, bus.Message{Subject: wire.TenantResultSubject(tenant, "wf_1"), MsgID: "res_" + tenant, Data: data})
		require.NoError(t, err)
	}
	for tenant, a := range map[string]*client.Client{"acme": acme, "globex": globex, "default": def} {
		wctx, cancel := context.WithTimeout(c, 10*time.Second)
		ch, err := a.Watch(wctx, a.AllResults())
		require.NoError(t, err)
		r, ok := <-ch
		require.True(t, ok, "%s got no result", tenant)
		require.Equal(t, "op_"+tenant, r.OperationID, "%s reads its own result", tenant)
		cancel()
	}
	// acme's RESULTS holds acme's result only: globex's and the default
	// tenant's were published before it and never reached acme's account.
	ajs, err := jetstream.New(s.raw(t, "agent-acme", client.InboxPrefix("acme")).nc)
	require.NoError(t, err)
	ast, err := ajs.Stream(c, wire.StreamResults)
	require.NoError(t, err)
	ainfo, err := ast.Info(c, jetstream.WithSubjectFilter(">"))
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{"opledger.results.acme.wf_1": 1}, ainfo.State.Subjects)

	// A plain subscription to acme's results is allowed and sees acme's
	// results live, and nothing of globex's published at the same time.
	live := s.raw(t, "agent-acme", client.InboxPrefix("acme"))
	lsub, err := live.nc.SubscribeSync("opledger.results.acme.>")
	require.NoError(t, err)
	require.NoError(t, live.nc.Flush())
	for _, tenant := range []string{"globex", "acme"} {
		_, err := svc.Publish(c, bus.Message{Subject: wire.TenantResultSubject(tenant, "wf_live"), MsgID: "live_" + tenant, Data: []byte(`{}`)})
		require.NoError(t, err)
	}
	lm, err := lsub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "opledger.results.acme.wf_live", lm.Subject)
	live.noViolations(t)

	// globex's consumer, even by name, is not within acme's reach: it lives
	// in globex's account.
	gjs, err := jetstream.New(s.raw(t, "agent-globex", client.InboxPrefix("globex")).nc)
	require.NoError(t, err)
	gcons, err := gjs.OrderedConsumer(c, wire.StreamResults, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"opledger.results.globex.>"}})
	require.NoError(t, err)
	name := gcons.CachedInfo().Name
	_, err = ajs.Consumer(c, wire.StreamResults, name)
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)
	araw := s.raw(t, "agent-acme", client.InboxPrefix("acme"))
	_, err = araw.nc.Request("$JS.API.CONSUMER.MSG.NEXT.RESULTS."+name, []byte(`{"batch":1,"no_wait":true}`), 2*time.Second)
	require.ErrorIs(t, err, nats.ErrNoResponders, "no consumer of that name in acme's account")
	araw.noViolations(t)

	// A push consumer of acme's own results aimed at globex's intents
	// delivers nowhere: that subject does not exist in acme's account. The
	// control, aimed at a subscription of acme's, shows that push delivery
	// works and how long it takes.
	push := func(name, deliver string) {
		_, err := ajs.CreateOrUpdatePushConsumer(c, wire.StreamResults, jetstream.ConsumerConfig{Name: name, FilterSubject: "opledger.results.acme.>",
			DeliverSubject: deliver, AckPolicy: jetstream.AckNonePolicy})
		require.NoError(t, err, "creating it is allowed: it is acme's own stream")
	}
	push("aimed-at-globex", "opledger.intents.globex.wf_2")
	sub, err := araw.nc.SubscribeSync("_INBOX_acme.push")
	require.NoError(t, err)
	push("control", "_INBOX_acme.push")
	_, err = sub.NextMsg(10 * time.Second)
	require.NoError(t, err, "the control consumer delivers")
	pinfo, err := ajs.PushConsumer(c, wire.StreamResults, "aimed-at-globex")
	require.NoError(t, err)
	require.Zero(t, pinfo.CachedInfo().Delivered.Consumer, "no interest on the deliver subject in acme's account, so nothing is sent")
	info, err = st.Info(c, jetstream.WithSubjectFilter(">"))
	require.NoError(t, err)
	require.Zero(t, info.State.Subjects["opledger.intents.globex.wf_2"])
}

// A service has its own consumer, its inbox and what every service process
// does (relay what it writes; make the streams), and nothing of the other
// services or of the agents. Breaking it: a wider pattern such as
// $JS.API.CONSUMER.> or _INBOX_SVC.> for a service.
func TestServiceDenials(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.withStreams(t)
	d := s.raw(t, "dispatcher", "_INBOX_SVC.dispatcher")
	for _, subject := range []string{
		"opledger.intents.acme.wf_1", // only agents bring intents
		"opledger.intents.wf_1",
		"$JS.API.CONSUMER.CREATE.INTENTS.planner-ingest.opledger.intents.>",
		"$JS.API.CONSUMER.CREATE.OPS.reconciler.opledger.ops.unknown.>",
		"$JS.API.CONSUMER.MSG.NEXT.OPS.reconciler",
		"$JS.API.CONSUMER.MSG.NEXT.INTENTS.planner-ingest",
		"$JS.API.CONSUMER.DELETE.OPS.dispatcher",
		"$JS.API.CONSUMER.CREATE.OPS.dispatcher", // no unfiltered consumer
		"$JS.ACK.INTENTS.planner-ingest.1.1.1.1.1.1",
		"$JS.ACK.OPS.compensator.1.1.1.1.1.1",
		"$JS.API.STREAM.DELETE.OPS",
		"$JS.API.STREAM.PURGE.INTENTS",
		"$JS.API.STREAM.MSG.DELETE.OPS",
		"$JS.API.STREAM.CREATE.OTHER",
		"$JS.API.STREAM.UPDATE.RESULTS", // nothing of it is enforced, so nothing to update
		"_INBOX_acme.abc",
	} {
		d.deniedPublish(t, subject)
	}
	for _, subject := range []string{"_INBOX_SVC.planner-ingest.>", "_INBOX_acme.>", "_INBOX.>", "opledger.results.>", "opledger.ops.>", "$JS.EVENT.>"} {
		d.deniedSubscribe(t, subject)
	}
}

// A service fixes the settings bus.EnsureStreams enforces on streams it
// finds (OPS keeping one message per subject, INTENTS' short duplicate
// window), with the STREAM.UPDATE it is allowed. Breaking it: removing
// those permissions from nats.conf (EnsureStreams then fails at start).
func TestServiceFixesStreamSettings(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := ctx(t)
	js := s.serviceJS(t, "planner-ingest")
	_, err := js.CreateStream(c, jetstream.StreamConfig{Name: wire.StreamOps, Subjects: []string{wire.OpsSubjectPrefix + ">"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	_, err = js.CreateStream(c, jetstream.StreamConfig{Name: wire.StreamIntents, Subjects: []string{wire.IntentSubjectPrefix + ">"},
		Duplicates: time.Hour, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)

	b, err := bus.ConnectAuth(c, s.url, "dispatcher", s.serviceAuth("dispatcher"), zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(b.Close)
	require.NoError(t, b.EnsureStreams(c, bus.StreamOptions{Memory: true}))
	st, err := js.Stream(c, wire.StreamOps)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.CachedInfo().Config.MaxMsgsPerSubject)
	st, err = js.Stream(c, wire.StreamIntents)
	require.NoError(t, err)
	require.Zero(t, st.CachedInfo().Config.Duplicates, "INTENTS dedupes nothing by Nats-Msg-Id")
	require.Equal(t, bus.StreamIntentsAnchor, st.CachedInfo().Config.Sources[0].Name)
}

// Each service may publish exactly the subjects its process writes
// (app.PublishPrefixes): every kind of command it writes, results and
// alerts (planner-ingest and the reconciler, which apply webhook evidence)
// are allowed, and the commands it never writes, alerts for the others and
// the reserved completed kind are refused. Breaking it: a service user
// with opledger.ops.> again (a compromised compensator could then forge
// any command, a dispatcher alerts), or a
// prefix in app.PublishPrefixes that nats.conf does not grant (its relay's
// publishes refused; TestPipelineWithServicesAsTheirUsers also fails).
func TestServicesPublishOnlyWhatTheyWrite(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.withStreams(t)
	kinds := []string{wire.KindDispatch, wire.KindUnknown, wire.KindFailed, wire.KindCompleted}
	for _, svc := range app.AllServices {
		c := s.raw(t, svc, app.ServiceInboxPrefix(svc))
		js, err := jetstream.New(c.nc)
		require.NoError(t, err)
		allowed := func(subject string) bool {
			for _, p := range app.PublishPrefixes[svc] {
				if strings.HasPrefix(subject, p) {
					return true
				}
			}
			return false
		}
		subjects := []string{wire.ResultSubject("wf_1"), wire.TenantResultSubject("acme", "wf_1"), wire.UnroutableSubject,
			"opledger.alerts.payments", "opledger.anchor.intents"}
		for _, k := range kinds {
			subjects = append(subjects, wire.OpsSubject(k, "capture_payment", "op_"+svc))
		}
		for _, subject := range subjects {
			if allowed(subject) {
				// A JetStream publish, as a relay makes it: stored.
				_, err := js.Publish(ctx(t), subject, []byte(`{}`), jetstream.WithMsgID(svc+subject))
				require.NoError(t, err, "%s publishing %s", svc, subject)
				continue
			}
			c.deniedPublish(t, subject)
		}
		require.True(t, allowed(wire.ResultSubject("x")), "%s answers agents", svc)
	}
	// What the lists say, in words: who may write which command.
	require.ElementsMatch(t, []string{"opledger.ops.dispatch.", "opledger.ops.unknown.", "opledger.ops.failed.", "opledger.results.", "opledger.alerts."},
		app.PublishPrefixes[app.PlannerIngest])
	require.NotContains(t, app.PublishPrefixes[app.Dispatcher], "opledger.alerts.")
	require.ElementsMatch(t, []string{"opledger.ops.dispatch.", "opledger.results."}, app.PublishPrefixes[app.Compensator])
}

// planner-ingest reads, as its own NATS user, how many dispatch commands
// wait for a dispatcher (its admission control), and no other consumer's
// state. Breaking it: nats.conf without $JS.API.CONSUMER.INFO.OPS.dispatcher
// for planner-ingest (admission would then hold nothing, logging that it
// cannot read the backlog), or a wider pattern for it.
func TestIngestReadsTheDispatchBacklog(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ingestBus := s.withStreams(t)
	djs := s.serviceJS(t, "dispatcher")
	_, err := djs.CreateOrUpdateConsumer(ctx(t), wire.StreamOps, jetstream.ConsumerConfig{Durable: "dispatcher",
		FilterSubject: wire.OpsFilter(wire.KindDispatch), AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	for i := range 3 {
		_, err := djs.Publish(ctx(t), wire.OpsSubject(wire.KindDispatch, "capture_payment", fmt.Sprintf("op_backlog_%d", i)), []byte(`{}`))
		require.NoError(t, err)
	}
	// The server counts a consumer's pending messages a moment after it
	// stores them: the count converges on 3.
	require.Eventually(t, func() bool {
		n, err := ingestBus.Unclaimed(ctx(t), wire.StreamOps, "dispatcher")
		return err == nil && n == 3
	}, 5*time.Second, 10*time.Millisecond, "planner-ingest reads the dispatchers' 3 pending commands")

	c := s.raw(t, "planner-ingest", app.ServiceInboxPrefix(app.PlannerIngest))
	for _, subject := range []string{"$JS.API.CONSUMER.INFO.OPS.reconciler", "$JS.API.CONSUMER.INFO.OPS.compensator", "$JS.API.CONSUMER.LIST.OPS"} {
		c.deniedPublish(t, subject)
	}
}
