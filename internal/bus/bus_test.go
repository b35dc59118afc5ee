package bus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/internal/testlog"
	"github.com/opledger/opledger/pkg/wire"
)

// env is an embedded JetStream with the opledger streams, a Bus on it, and a
// plain JetStream client for inspecting consumers.
type env struct {
	bus *bus.Bus
	js  jetstream.JetStream
}

func newEnv(t *testing.T) env {
	t.Helper()
	return newEnvWith(t, bus.StreamOptions{Memory: true})
}

// newEnvWith is newEnv with the streams made with o.
func newEnvWith(t *testing.T, o bus.StreamOptions) env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, js := newServer(t)
	b, _ := ensureStreams(t, ctx, url, o)
	return env{bus: b, js: js}
}

// ensureStreams connects a Bus to url, logging into the returned buffer,
// and makes sure of the streams with o, as a service does at start.
func ensureStreams(t *testing.T, ctx context.Context, url string, o bus.StreamOptions) (*bus.Bus, *testlog.Buffer) {
	t.Helper()
	var logs testlog.Buffer
	b, err := bus.Connect(ctx, url, "t", zerolog.New(&logs))
	require.NoError(t, err)
	t.Cleanup(b.Close)
	require.NoError(t, b.EnsureStreams(ctx, o))
	return b, &logs
}

// newServer starts an embedded JetStream with no streams and returns its
// URL and a plain JetStream client on it.
func newServer(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	return newServerConf(t, "")
}

// newServerConf is newServer with a nats-server configuration ("": none).
func newServerConf(t *testing.T, conf string) (string, jetstream.JetStream) {
	t.Helper()
	var opts natsembed.Options
	if conf != "" {
		opts.ConfigFile = filepath.Join(t.TempDir(), "nats.conf")
		require.NoError(t, os.WriteFile(opts.ConfigFile, []byte(conf), 0o600))
	}
	srv, err := natsembed.Start(opts)
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return srv.URL(), js
}

// publish sends n messages, one per subject prefix.<i> (the OPS stream keeps
// one message per subject, as it keeps one command per operation).
func (e env) publish(t *testing.T, prefix string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs := make([]bus.Message, n)
	for i := range msgs {
		id := strconv.Itoa(i)
		msgs[i] = bus.Message{Subject: prefix + "." + id, MsgID: id, Data: []byte(id)}
	}
	for i, err := range e.bus.PublishBatch(ctx, msgs) {
		require.NoError(t, err, "message %d", i)
	}
}

func (e env) consumerInfo(t *testing.T, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := e.js.Consumer(ctx, wire.StreamOps, durable)
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	return info
}

// waitClosed fails the test unless ch is closed within d.
func waitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// TestStopLetsInFlightHandlerFinish cancels the parent context while a handler
// is mid-work: the handler's context stays live, the handler finishes, its
// message is acknowledged rather than redelivered, and stop returns only after
// the handler is done.
func TestStopLetsInFlightHandlerFinish(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	subject := wire.OpsSubjectPrefix + "dispatch.capture_payment"
	e.publish(t, subject, 1)

	started := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int32
	var finished atomic.Bool
	var ctxErrAfterRelease atomic.Value // error, or errNone
	errNone := errors.New("none")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := e.bus.Consume(ctx, bus.ConsumerConfig{
		Stream: wire.StreamOps, Durable: "inflight", Filters: []string{subject + ".>"},
		Workers: 2, AckWait: 5 * time.Second, ShutdownGrace: 20 * time.Second,
	}, func(hctx context.Context, _ bus.Delivery) error {
		if calls.Add(1) == 1 {
			close(started)
		}
		<-release
		if err := hctx.Err(); err != nil {
			ctxErrAfterRelease.Store(err)
		} else {
			ctxErrAfterRelease.Store(errNone)
		}
		time.Sleep(50 * time.Millisecond) // still working after release: stop must wait for this too
		finished.Store(true)
		return nil
	})
	require.NoError(t, err)

	waitClosed(t, started, 10*time.Second, "the handler to start")
	cancel() // SIGTERM: the parent context ends while the handler is mid-work

	// The goroutine watching ctx has begun stopping; a second stop waits for it.
	stopped := make(chan struct{})
	var finishedWhenStopped atomic.Bool
	go func() {
		stop()
		finishedWhenStopped.Store(finished.Load())
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("stop returned while a handler was still in flight")
	case <-time.After(300 * time.Millisecond):
	}

	close(release)
	waitClosed(t, stopped, 10*time.Second, "stop to return")
	require.True(t, finishedWhenStopped.Load(), "stop returned before the handler finished")
	require.Equal(t, errNone, ctxErrAfterRelease.Load(), "the handler's context was cancelled with the parent")
	require.EqualValues(t, 1, calls.Load())

	// The message was acknowledged: nothing pending, nothing redelivered.
	require.Eventually(t, func() bool {
		info := e.consumerInfo(t, "inflight")
		return info.NumAckPending == 0 && info.AckFloor.Stream == 1
	}, 10*time.Second, 20*time.Millisecond, "the message was not acknowledged")
	info := e.consumerInfo(t, "inflight")
	require.Zero(t, info.NumRedelivered)
	require.Zero(t, info.NumPending)
	require.EqualValues(t, 1, info.Delivered.Stream)
}

// TestStopCancelsHandlersAfterGrace: a handler that does not finish by itself
// gets its context cancelled once ShutdownGrace has passed, and stop returns.
func TestStopCancelsHandlersAfterGrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	subject := wire.OpsSubjectPrefix + "dispatch.send_email"
	e.publish(t, subject, 1)

	const grace = 200 * time.Millisecond
	started := make(chan struct{})
	var startOnce sync.Once
	var cancelledAt atomic.Int64
	var parentCancelledAt atomic.Int64

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := e.bus.Consume(ctx, bus.ConsumerConfig{
		Stream: wire.StreamOps, Durable: "stuck", Filters: []string{subject + ".>"},
		Workers: 1, AckWait: 5 * time.Second, ShutdownGrace: grace,
	}, func(hctx context.Context, _ bus.Delivery) error {
		startOnce.Do(func() { close(started) })
		<-hctx.Done() // never finishes on its own
		cancelledAt.Store(time.Now().UnixNano())
		return hctx.Err()
	})
	require.NoError(t, err)

	waitClosed(t, started, 10*time.Second, "the handler to start")
	parentCancelledAt.Store(time.Now().UnixNano())
	cancel()

	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	waitClosed(t, stopped, 10*time.Second, "stop to return")
	require.NotZero(t, cancelledAt.Load(), "the handler's context was never cancelled")
	waited := time.Duration(cancelledAt.Load() - parentCancelledAt.Load())
	require.GreaterOrEqual(t, waited, grace, "the handler's context was cancelled before the grace ran out")
}

// TestStopWhileFlowing starts and stops a consumer repeatedly while messages
// are flowing, then drains what is left: nothing panics, and every message is
// handled successfully (and so acknowledged) exactly once.
func TestStopWhileFlowing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	subject := wire.OpsSubjectPrefix + "completed.hammer"
	const total = 2000
	e.publish(t, subject, total)

	var mu sync.Mutex
	acked := make(map[string]int, total)
	var ackedTotal atomic.Int64
	var deliveries atomic.Int64
	handler := func(_ context.Context, d bus.Delivery) error {
		deliveries.Add(1)
		// A little work, and now and then a retryable failure.
		time.Sleep(time.Duration(len(d.Data)%3) * 100 * time.Microsecond)
		if d.Delivered == 1 && d.Data[len(d.Data)-1] == '7' {
			return fmt.Errorf("transient")
		}
		mu.Lock()
		acked[string(d.Data)]++
		mu.Unlock()
		ackedTotal.Add(1)
		return nil
	}
	cfg := bus.ConsumerConfig{
		Stream: wire.StreamOps, Durable: "hammer", Filters: []string{subject + ".>"},
		Workers: 8, AckWait: 3 * time.Second, ShutdownGrace: 5 * time.Second,
	}

	for round := range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		stop, err := e.bus.Consume(ctx, cfg, handler)
		require.NoError(t, err)
		// Let messages flow, then stop in the middle of it.
		before := ackedTotal.Load()
		require.Eventually(t, func() bool { return ackedTotal.Load() >= before+25 || ackedTotal.Load() == total },
			10*time.Second, time.Millisecond, "round %d: no progress", round)
		if round%2 == 0 {
			stop()
		} else {
			cancel() // the watching goroutine stops; stop waits for it
			stop()
		}
		cancel()
		stop() // idempotent
	}
	require.Less(t, ackedTotal.Load(), int64(total), "the rounds drained the stream: stop was never called mid-flow")
	t.Logf("handled %d of %d messages over the stopped rounds", ackedTotal.Load(), total)

	// Drain whatever is left with a final run.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := e.bus.Consume(ctx, cfg, handler)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) == total
	}, 60*time.Second, 20*time.Millisecond, "not every message was handled")
	require.Eventually(t, func() bool {
		info := e.consumerInfo(t, "hammer")
		return info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream == total
	}, 10*time.Second, 20*time.Millisecond, "not every message was acknowledged")
	stop()

	mu.Lock()
	defer mu.Unlock()
	for i := range total {
		require.Equal(t, 1, acked[strconv.Itoa(i)], "message %d handled successfully %d times", i, acked[strconv.Itoa(i)])
	}
	t.Logf("deliveries %d for %d messages", deliveries.Load(), total)
}

// Credentials in a NATS URL never reach an error message (services print
// these to their logs): the password or token is replaced, the user name,
// which is not a secret and says who failed, is kept.
func TestConnectErrorHidesCredentials(t *testing.T) {
	t.Parallel()
	_, err := bus.Connect(context.Background(), "nats://opuser:s3cr3t-pass@127.0.0.1:1", "t", zerolog.Nop())
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cr3t-pass")
	require.Contains(t, err.Error(), "nats://opuser:***@127.0.0.1:1")
	_, err = bus.Connect(context.Background(), "nats://t0ken-canary@127.0.0.1:1", "t", zerolog.Nop())
	require.Error(t, err)
	require.NotContains(t, err.Error(), "t0ken-canary")
	require.Contains(t, err.Error(), "nats://***@127.0.0.1:1")
}

// The OPS stream keeps one message per subject, and a command's subject
// names its operation: a newer command for an operation replaces an older
// one still waiting, so re-writing a command never multiplies it.
//
// Breaking it: without MaxMsgsPerSubject on OPS the stream holds all three.
func TestOpsKeepsOneCommandPerOperation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	subject := wire.OpsSubject(wire.KindDispatch, "capture_payment", "op_1")
	for i := range 3 {
		_, err := e.bus.Publish(ctx, bus.Message{Subject: subject, MsgID: "m" + strconv.Itoa(i), Data: []byte(strconv.Itoa(i))})
		require.NoError(t, err)
	}
	other := wire.OpsSubject(wire.KindDispatch, "capture_payment", "op_2")
	_, err := e.bus.Publish(ctx, bus.Message{Subject: other, MsgID: "o", Data: []byte("o")})
	require.NoError(t, err)
	st, err := e.js.Stream(ctx, wire.StreamOps)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, info.State.Msgs, "one live command per operation")
	m, err := st.GetLastMsgForSubject(ctx, subject)
	require.NoError(t, err)
	require.Equal(t, "2", string(m.Data), "the newest command wins")
}

// A NATS server that lost its store loses the streams and the durable
// consumer with them. A running consumer notices, recreates both and goes
// on consuming, without a restart.
//
// Breaking it: without Consume's watchdog the consumer stays gone and the
// message published after the loss is never handled.
func TestConsumeRecreatesLostStreamAndConsumer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 16)
	stop, err := e.bus.Consume(ctx, bus.ConsumerConfig{
		Stream: wire.StreamOps, Durable: "phoenix", Filters: []string{wire.OpsFilter(wire.KindDispatch)},
		Workers: 2, CheckInterval: 50 * time.Millisecond,
	}, func(_ context.Context, d bus.Delivery) error {
		got <- string(d.Data)
		return nil
	})
	require.NoError(t, err)
	defer stop()
	e.publish(t, wire.OpsSubjectPrefix+"dispatch.t", 1)
	require.Equal(t, "0", <-got)

	// The store is lost: the streams go, and the consumer with them.
	for _, name := range []string{wire.StreamIntents, wire.StreamOps, wire.StreamResults, wire.StreamAlerts} {
		require.NoError(t, e.js.DeleteStream(ctx, name))
	}
	require.Eventually(t, func() bool {
		_, err := e.js.Consumer(ctx, wire.StreamOps, "phoenix")
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the consumer was never recreated")
	require.NoError(t, e.bus.Check(ctx))
	e.publish(t, wire.OpsSubjectPrefix+"dispatch.after", 1)
	select {
	case d := <-got:
		require.Equal(t, "0", d)
	case <-time.After(10 * time.Second):
		t.Fatal("a message published after the loss was never handled")
	}
	st, err := e.js.Stream(ctx, wire.StreamOps)
	require.NoError(t, err)
	require.Equal(t, jetstream.WorkQueuePolicy, st.CachedInfo().Config.Retention, "recreated as it was made")
}

// INTENTS dedupes nothing by Nats-Msg-Id, so no publisher (of any tenant)
// can make JetStream drop another's intent by publishing its id first:
// an attacker's intent with the victim's event id as Nats-Msg-Id, then the
// victim's with the same header a moment later, are both stored, and so is
// a plain resend. A stream that an older opledger made with a duplicate
// window is corrected at start. Breaking it: INTENTS with any duplicate
// window (the victim's publish acknowledged as a duplicate and never
// stored, so never answered).
func TestIntentsIgnorePublishersMsgID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	publish := func(subject string) *jetstream.PubAck {
		m := nats.NewMsg(subject)
		m.Data = []byte(subject)
		m.Header.Set(wire.HeaderMsgID, "conv_42:call_7")
		ack, err := e.js.PublishMsg(ctx, m)
		require.NoError(t, err)
		return ack
	}
	first := publish(wire.TenantIntentSubject("attacker", "wf_1"))
	for _, subject := range []string{wire.TenantIntentSubject("victim", "wf_1"), wire.IntentSubject("wf_1"), wire.TenantIntentSubject("victim", "wf_1")} {
		ack := publish(subject)
		require.False(t, ack.Duplicate, "%s dropped as a duplicate of another tenant's publish", subject)
		require.Greater(t, ack.Sequence, first.Sequence)
	}
	st, err := e.js.Stream(ctx, wire.StreamIntents)
	require.NoError(t, err)
	require.Zero(t, st.CachedInfo().Config.Duplicates)

	// A stream as an older version made it (100 ms window, no anchor) is
	// set right by the next process that starts.
	cfg := st.CachedInfo().Config
	cfg.Sources, cfg.Duplicates = nil, bus.IntentDuplicateWindow
	_, err = e.js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	require.NoError(t, e.bus.EnsureStreams(ctx, bus.StreamOptions{Memory: true}))
	st, err = e.js.Stream(ctx, wire.StreamIntents)
	require.NoError(t, err)
	require.Zero(t, st.CachedInfo().Config.Duplicates)
	require.False(t, publish(wire.TenantIntentSubject("victim", "wf_1")).Duplicate)
	require.False(t, publish(wire.TenantIntentSubject("victim", "wf_1")).Duplicate)
}

// INTENTS is a work queue: an intent stays in the stream while
// planner-ingest has not acknowledged it (nothing is lost before it is in
// the ledger) and leaves it once acknowledged, so that the stream holds the
// backlog, not a day of every agent's arguments.
//
// Breaking it: with limits retention both intents stay after their acks.
func TestIntentsLeaveOnceHandled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	st, err := e.js.Stream(ctx, wire.StreamIntents)
	require.NoError(t, err)
	require.Equal(t, jetstream.WorkQueuePolicy, st.CachedInfo().Config.Retention)
	msgs := func() uint64 {
		info, err := st.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}
	for _, id := range []string{"done", "held"} {
		_, err := e.js.Publish(ctx, wire.IntentSubject("wf_"+id), []byte(id))
		require.NoError(t, err)
	}
	require.EqualValues(t, 2, msgs(), "kept while no consumer exists")

	release, handled := make(chan struct{}), make(chan string, 2)
	stop, err := e.bus.Consume(ctx, bus.ConsumerConfig{Stream: wire.StreamIntents, Durable: "planner-ingest", Workers: 2,
		Filters: []string{wire.IntentSubjectPrefix + ">"}},
		func(hctx context.Context, d bus.Delivery) error {
			handled <- string(d.Data)
			if string(d.Data) == "held" {
				select {
				case <-release:
				case <-hctx.Done():
					return hctx.Err()
				}
			}
			return nil
		})
	require.NoError(t, err)
	defer stop()
	seen := map[string]bool{<-handled: true, <-handled: true}
	require.Equal(t, map[string]bool{"done": true, "held": true}, seen)
	require.Eventually(t, func() bool { return msgs() == 1 }, 10*time.Second, 20*time.Millisecond,
		"the acknowledged intent should leave; the one in hand should stay")
	m, err := st.GetLastMsgForSubject(ctx, wire.IntentSubject("wf_held"))
	require.NoError(t, err)
	require.Equal(t, "held", string(m.Data))
	close(release)
	require.Eventually(t, func() bool { return msgs() == 0 }, 10*time.Second, 20*time.Millisecond)

	// One reader: a second consumer (another fleet, an audit tap) is
	// refused at its start, loudly. With limits retention it would have
	// been given every intent too: a second fleet ingesting each twice,
	// a tap reading every agent's arguments.
	_, err = e.bus.Consume(ctx, bus.ConsumerConfig{Stream: wire.StreamIntents, Durable: "planner-ingest-blue", Workers: 1,
		Filters: []string{wire.IntentSubjectPrefix + ">"}},
		func(context.Context, bus.Delivery) error { return nil })
	require.ErrorContains(t, err, "not unique on workqueue stream")
}

// An INTENTS made before it became a work queue (limits retention, which
// JetStream cannot change to a work queue) is left as it is, with its
// messages, and named in a warning.
func TestIntentsWithLimitsRetentionLeftAndWarned(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, js := newServer(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: wire.StreamIntents, Subjects: []string{wire.IntentSubjectPrefix + ">"},
		Retention: jetstream.LimitsPolicy, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	_, err = js.Publish(ctx, wire.IntentSubject("wf_1"), []byte("before"))
	require.NoError(t, err)

	_, logs := ensureStreams(t, ctx, url, bus.StreamOptions{Memory: true})
	st, err := js.Stream(ctx, wire.StreamIntents)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, jetstream.LimitsPolicy, info.Config.Retention)
	require.EqualValues(t, 1, info.State.Msgs, "nothing of what it held is dropped")
	require.Contains(t, logs.String(), "cannot make an existing stream a work queue")
}

// INTENTS is bounded: full, it refuses new intents (the publisher's PubAck
// is an error) and keeps every intent it stored, which agents were told
// were stored. A flood of intents while planner-ingest is behind or down
// therefore cannot fill the NATS server's store, which would stop every
// stream of every tenant.
//
// Breaking it: with no bound every publish succeeds; with DiscardOld the
// first intent is dropped to make room.
func TestIntentsBoundedRefuseWhenFull(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, bus.StreamOptions{Memory: true, IntentsMaxBytes: 8 << 10})
	js := e.js
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, wire.StreamIntents)
	require.NoError(t, err)
	require.EqualValues(t, 8<<10, st.CachedInfo().Config.MaxBytes)
	require.Equal(t, jetstream.DiscardNew, st.CachedInfo().Config.Discard)

	body := []byte(strings.Repeat("x", 500))
	stored := 0
	var refused error
	for i := range 100 {
		if _, err := js.Publish(ctx, wire.IntentSubject("wf_"+strconv.Itoa(i)), body); err != nil {
			refused = err
			break
		}
		stored++
	}
	require.Error(t, refused, "a bounded INTENTS refuses once full")
	t.Logf("refused after %d intents: %v", stored, refused)
	require.Greater(t, stored, 5)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, stored, info.State.Msgs, "nothing stored was dropped to make room")
	require.EqualValues(t, 1, info.State.FirstSeq)
	m, err := st.GetLastMsgForSubject(ctx, wire.IntentSubject("wf_0"))
	require.NoError(t, err)
	require.Equal(t, body, m.Data)
}

// An INTENTS with no bound, or one that drops stored intents when full, is
// set right at the next start; a bound an operator chose is kept.
func TestIntentsBoundSetIfMissing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		memory   bool
		maxBytes int64
		want     int64
	}{
		{"unbounded, in memory", true, -1, bus.MemoryIntentsMaxBytes},
		{"unbounded, on file", false, -1, bus.DefaultIntentsMaxBytes},
		{"operator's bound", true, 10 << 20, 10 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			url, js := newServer(t)
			b, logs := ensureStreams(t, ctx, url, bus.StreamOptions{Memory: tc.memory})
			st, err := js.Stream(ctx, wire.StreamIntents)
			require.NoError(t, err)
			cfg := st.CachedInfo().Config
			cfg.MaxBytes, cfg.Discard = tc.maxBytes, jetstream.DiscardOld
			_, err = js.UpdateStream(ctx, cfg)
			require.NoError(t, err)

			require.NoError(t, b.EnsureStreams(ctx, bus.StreamOptions{Memory: tc.memory}))
			st, err = js.Stream(ctx, wire.StreamIntents)
			require.NoError(t, err)
			require.Equal(t, tc.want, st.CachedInfo().Config.MaxBytes)
			require.Equal(t, jetstream.DiscardNew, st.CachedInfo().Config.Discard)
			require.Contains(t, logs.String(), "refuses new intents when full")
		})
	}
}
