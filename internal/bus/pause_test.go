package bus_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/pkg/wire"
)

// TestHeartbeatKeepsLongHandlerMessage: a handler that runs for three times
// AckWait keeps its message, because Consume reports it in progress; it is
// delivered once. Without heartbeats JetStream redelivers it after AckWait
// and the handler sees a second delivery.
func TestHeartbeatKeepsLongHandlerMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	subject := wire.OpsSubjectPrefix + "dispatch.heartbeat"
	e.publish(t, subject, 1)
	var calls atomic.Int32
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := e.bus.Consume(ctx, bus.ConsumerConfig{
		Stream: wire.StreamOps, Durable: "heartbeat", Filters: []string{subject + ".>"},
		Workers: 2, AckWait: time.Second, Heartbeat: 200 * time.Millisecond,
	}, func(context.Context, bus.Delivery) error {
		if calls.Add(1) == 1 {
			time.Sleep(3 * time.Second) // a long vendor call
			close(done)
		}
		return nil
	})
	require.NoError(t, err)
	defer stop()
	waitClosed(t, done, 20*time.Second, "the long handler to finish")
	require.Eventually(t, func() bool { return e.consumerInfo(t, "heartbeat").NumAckPending == 0 },
		10*time.Second, 20*time.Millisecond)
	require.EqualValues(t, 1, calls.Load(), "the message was redelivered while its handler still ran")
	require.Zero(t, e.consumerInfo(t, "heartbeat").NumRedelivered)
}

// TestPausedConsumerGivesMessagesBack: a consumer whose handlers fail while
// Ready reports the ledger unreachable stops handling messages (what it
// still receives is Nak'ed, not handled or held), and resumes once Ready
// succeeds again. It fails if the consumer keeps calling its handler while
// unreachable, or never resumes.
func TestPausedConsumerGivesMessagesBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	subject := wire.OpsSubjectPrefix + "unknown.pause"
	var down atomic.Bool
	down.Store(true)
	var calls, whileDown atomic.Int32
	var handled atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := e.bus.Consume(ctx, bus.ConsumerConfig{
		Stream: wire.StreamOps, Durable: "pause", Filters: []string{subject + ".>"},
		Workers: 2, AckWait: 30 * time.Second, CheckInterval: 200 * time.Millisecond, NakDelay: 50 * time.Millisecond,
		Ready: func(context.Context) error {
			if down.Load() {
				return errors.New("ledger unreachable")
			}
			return nil
		},
	}, func(context.Context, bus.Delivery) error {
		calls.Add(1)
		if down.Load() {
			whileDown.Add(1)
			return errors.New("statement timed out")
		}
		handled.Add(1)
		return nil
	})
	require.NoError(t, err)
	defer stop()
	e.publish(t, subject, 20)
	require.Eventually(t, func() bool { return calls.Load() > 0 }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(time.Second) // paused: the handler must not be called again meanwhile
	// The first failure pauses; at most the messages already with workers
	// (2) were handled before the pause took hold.
	require.LessOrEqual(t, whileDown.Load(), int32(2), "handlers kept running while the ledger was unreachable")
	down.Store(false)
	require.Eventually(t, func() bool { return handled.Load() == 20 }, 20*time.Second, 20*time.Millisecond,
		"the consumer did not resume once the ledger answered")
}
