// Package bus is opledger's transport over NATS JetStream: stream setup,
// publishing with Nats-Msg-Id, and durable pull consumers shared by a fleet.
//
// JetStream is transport, not the ledger: its duplicate window is finite and
// in memory, so every consumer must stay safe under redelivery by checking the
// ledger before it acts.
package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"runtime/debug"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/wire"
)

// Bus is a connection to NATS with JetStream.
type Bus struct {
	name string
	nc   *nats.Conn
	js   jetstream.JetStream
	log  zerolog.Logger

	mu sync.Mutex
	// bound lists the durable consumers Consume bound, for Check.
	bound []boundConsumer
	// streams are the options streams are (re)created with.
	streams StreamOptions
}

type boundConsumer struct{ stream, durable string }

// Connect dials NATS at url without credentials. name identifies the
// client in server monitoring.
func Connect(ctx context.Context, url, name string, log zerolog.Logger) (*Bus, error) {
	return ConnectAuth(ctx, url, name, Auth{}, log)
}

// ConnectAuth dials NATS at url with the credentials and TLS settings of
// auth. Errors never contain a secret: the URL in them is redacted
// (RedactURL), and a refused credential reads "nats: authorization
// violation".
func ConnectAuth(ctx context.Context, url, name string, auth Auth, log zerolog.Logger) (*Bus, error) {
	aopts, err := auth.Options()
	if err != nil {
		return nil, err
	}
	opts := append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Msg("nats disconnected")
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info().Msg("nats reconnected") }),
		// A permission the server refuses (a misconfigured user) is logged,
		// never silent: the request it belongs to then times out.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Warn().Err(err)
			if sub != nil {
				ev = ev.Str("subscription", sub.Subject)
			}
			ev.Msg("nats error")
		})}, aopts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("bus: connect %s (credential %s): %w", RedactURL(url), auth.Kind(), redact.Wrap(err, url))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	return &Bus{name: name, nc: nc, js: js, log: log}, nil
}

// Close drains and closes the connection.
func (b *Bus) Close() {
	_ = b.nc.Drain()
}

// Name is the client name the bus connected with.
func (b *Bus) Name() string { return b.name }

// Conn exposes the NATS connection for core request/reply and subscriptions.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// Reachable reports whether the server answers on this connection now: it
// is connected and a round trip (PING/PONG) completes before ctx ends. A
// connection that is down, reconnecting, or silently cut off (no data
// gets through, nothing closed it yet) is not reachable.
func (b *Bus) Reachable(ctx context.Context) bool {
	return b.nc.Status() == nats.CONNECTED && b.nc.FlushWithContext(ctx) == nil
}

// Check reports why the bus cannot do its work, or nil: the connection is
// not up, or a stream or durable consumer this bus consumes from no longer
// exists on the server (a server that lost its store).
func (b *Bus) Check(ctx context.Context) error {
	if st := b.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("nats %s", strings.ToLower(st.String()))
	}
	b.mu.Lock()
	bound := slices.Clone(b.bound)
	b.mu.Unlock()
	for _, c := range bound {
		if _, err := b.js.Consumer(ctx, c.stream, c.durable); err != nil {
			return fmt.Errorf("consumer %s on stream %s: %w", c.durable, c.stream, err)
		}
	}
	return nil
}

// StreamOptions tune the streams EnsureStreams creates.
type StreamOptions struct {
	// Replicas per stream; 1 for a single server.
	Replicas int
	// DuplicateWindow is JetStream's Nats-Msg-Id dedupe window for OPS and
	// RESULTS (default 2m). INTENTS has none (StreamIntentsAnchor).
	DuplicateWindow time.Duration
	// MaxAge bounds how long messages are kept (default 24h for INTENTS and
	// OPS, 1h for RESULTS, 7 days for ALERTS); INTENTS and OPS, work
	// queues, let a message go as soon as it is acted on. The ledger, not
	// the stream, is the record.
	MaxAge time.Duration
	// Memory stores streams in memory (tests, benchmarks); default file.
	Memory bool
	// IntentsMaxBytes bounds what INTENTS holds (default
	// DefaultIntentsMaxBytes, or MemoryIntentsMaxBytes with Memory); beyond
	// it JetStream refuses new intents.
	IntentsMaxBytes int64
	// ResultsMaxBytes bounds what RESULTS holds (default
	// DefaultResultsMaxBytes, or MemoryResultsMaxBytes with Memory); beyond
	// it JetStream drops the oldest results to store new ones.
	ResultsMaxBytes int64
}

// MemoryIntentsMaxBytes is the default bound of an INTENTS kept in memory
// (tests, the bench): JetStream sets a bounded stream's bytes aside in its
// memory budget (three quarters of the machine's memory) when it creates
// the stream.
const MemoryIntentsMaxBytes = 256 << 20

// DefaultIntentsMaxBytes bounds INTENTS: the intents planner-ingest has not
// yet put in the ledger, whoever sent them and however fast. An agent that
// publishes faster than the ledger takes intents in (planner-ingest holds
// them while the dispatchers are behind, see ingest.Config.MaxBacklog), or
// while planner-ingest is down, would otherwise fill the NATS server's
// store, and a server whose JetStream store is full takes no message on any
// stream: no command, no result, for any tenant. Full, INTENTS refuses new
// intents (DiscardNew: the publisher's PubAck is an error, and what is
// stored stays) instead of dropping the oldest, which agents were told were
// stored. 1 GiB is about 1.5 million intents of the bench's size.
const DefaultIntentsMaxBytes = 1 << 30

// DefaultResultsMaxBytes bounds RESULTS besides its age (an hour): every
// result of every operation goes through it, about 1.4 kB an operation in
// the bench (an acknowledgement and a final result), so at 2,000
// operations a second an hour of them is about 10 GB, and a server whose
// JetStream store is full takes no message on any stream. Full, RESULTS
// drops its oldest results (DiscardOld): new results are the ones agents
// wait for, and the ledger, not the stream, is the record, so an agent
// that finds its result gone sends the intent again and is answered from
// the ledger. 4 GiB is about 25 minutes of results at 2,000 operations a
// second.
const DefaultResultsMaxBytes = 4 << 30

// MemoryResultsMaxBytes is the default bound of a RESULTS kept in memory
// (tests, the bench), which JetStream sets aside in its memory budget as it
// does INTENTS' (MemoryIntentsMaxBytes).
const MemoryResultsMaxBytes = 256 << 20

// EnsureStreams creates INTENTS, OPS, RESULTS and ALERTS where they do not exist
// yet, and remembers o for recreating them should the server lose them.
// Existing streams are left as the operator configured them, except that
// OPS must keep at most one message per subject (one live command per
// operation and kind), INTENTS must not dedupe by Nats-Msg-Id (see
// StreamIntentsAnchor), and INTENTS must be bounded and refuse new intents
// when full rather than drop stored ones (DefaultIntentsMaxBytes; a bound
// an operator set is kept); these are set if missing. A RESULTS without a
// byte bound (made before DefaultResultsMaxBytes) is named in a warning.
// Several processes may call it at once.
//
// OPS is a work queue: a command leaves the stream once a worker has acked
// it, so the stream holds only commands still to do. So is INTENTS: an
// intent leaves it once planner-ingest has it in the ledger (or refused
// it), so that the stream holds the backlog, not a day of every agent's
// arguments. JetStream cannot turn an existing stream into a work queue;
// an INTENTS made with limits retention (before December 2026) is left as
// it is and named in a warning (docs/protocol.md says how to replace it).
func (b *Bus) EnsureStreams(ctx context.Context, o StreamOptions) error {
	b.mu.Lock()
	b.streams = o
	b.mu.Unlock()
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.DuplicateWindow == 0 {
		o.DuplicateWindow = 2 * time.Minute
	}
	bound := func(set, onFile, inMemory int64) int64 {
		switch {
		case set > 0:
			return set
		case o.Memory:
			return inMemory
		}
		return onFile
	}
	o.IntentsMaxBytes = bound(o.IntentsMaxBytes, DefaultIntentsMaxBytes, MemoryIntentsMaxBytes)
	o.ResultsMaxBytes = bound(o.ResultsMaxBytes, DefaultResultsMaxBytes, MemoryResultsMaxBytes)
	storage := jetstream.FileStorage
	if o.Memory {
		storage = jetstream.MemoryStorage
	}
	age := func(def time.Duration) time.Duration {
		if o.MaxAge > 0 {
			return o.MaxAge
		}
		return def
	}
	for _, sc := range []jetstream.StreamConfig{
		// The anchor first: INTENTS sources from it.
		{Name: StreamIntentsAnchor, Subjects: []string{intentsAnchorSubject}, MaxMsgs: 1, MaxAge: time.Hour,
			Retention: jetstream.LimitsPolicy, Description: "empty on purpose: INTENTS sources from it so that it dedupes nothing by Nats-Msg-Id"},
		{Name: wire.StreamIntents, Subjects: []string{wire.IntentSubjectPrefix + ">"}, MaxAge: age(24 * time.Hour), Retention: jetstream.WorkQueuePolicy,
			MaxBytes: o.IntentsMaxBytes, Discard: jetstream.DiscardNew, Sources: []*jetstream.StreamSource{{Name: StreamIntentsAnchor}}},
		{Name: wire.StreamOps, Subjects: []string{wire.OpsSubjectPrefix + ">"}, MaxAge: age(24 * time.Hour),
			Retention: jetstream.WorkQueuePolicy, MaxMsgsPerSubject: 1, Duplicates: o.DuplicateWindow},
		{Name: wire.StreamResults, Subjects: []string{wire.ResultSubjectPrefix + ">"}, MaxAge: age(time.Hour), Retention: jetstream.LimitsPolicy,
			MaxBytes: o.ResultsMaxBytes, Discard: jetstream.DiscardOld, Duplicates: o.DuplicateWindow},
		// Alerts are for people, who may look once a day.
		{Name: wire.StreamAlerts, Subjects: []string{wire.AlertSubjectPrefix + ">"}, MaxAge: age(7 * 24 * time.Hour), Retention: jetstream.LimitsPolicy,
			Duplicates: o.DuplicateWindow},
	} {
		sc.Storage = storage
		sc.Replicas = o.Replicas
		if err := b.ensureStream(ctx, sc); err != nil {
			return err
		}
	}
	return nil
}

// StreamIntentsAnchor is an empty stream INTENTS sources from. JetStream
// dedupes a stream by Nats-Msg-Id across all of it (every tenant) and a
// stream capturing subjects always has a duplicate window (at least
// 100 ms), except one that sources from another stream, whose window may
// be zero: no dedupe at all. So INTENTS sources from this anchor, and a
// Nats-Msg-Id set by a publisher, of any tenant, can never make JetStream
// drop another publisher's intent. The ledger dedupes event ids per tenant.
const StreamIntentsAnchor = "INTENTS_ANCHOR"

// intentsAnchorSubject is the anchor's subject, which nobody is allowed to
// publish to (deploy/nats/nats.conf grants it to no one).
const intentsAnchorSubject = "opledger.anchor.intents"

// IntentDuplicateWindow is INTENTS' Nats-Msg-Id dedupe window should a
// server refuse a stream without one (one that ignores the anchor): the
// shortest JetStream allows, so that another tenant's publish could drop
// an intent only within 100 ms.
const IntentDuplicateWindow = 100 * time.Millisecond

// intentsDedupeOff reports whether INTENTS' configuration dedupes nothing.
func intentsDedupeOff(c jetstream.StreamConfig) bool {
	return c.Duplicates == 0 && slices.ContainsFunc(c.Sources, func(s *jetstream.StreamSource) bool { return s.Name == StreamIntentsAnchor })
}

func (b *Bus) ensureStream(ctx context.Context, sc jetstream.StreamConfig) error {
	st, err := b.js.Stream(ctx, sc.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if sc.Name == wire.StreamResults {
			// A server or account with less storage than the bound gets a
			// smaller one (down to client.MinResultsMaxBytes, then none).
			st, err = client.CreateBoundedStream(ctx, b.js, sc, client.MinResultsMaxBytes)
			if err == nil && st.CachedInfo().Config.MaxBytes != sc.MaxBytes {
				b.log.Warn().Str("stream", sc.Name).Int64("asked_max_bytes", sc.MaxBytes).Int64("max_bytes", st.CachedInfo().Config.MaxBytes).
					Msg("the NATS server has less JetStream storage than RESULTS' bound; RESULTS holds what fits (max_bytes -1: no byte bound; docs/protocol.md)")
			}
		} else {
			st, err = b.js.CreateStream(ctx, sc)
		}
		if err == nil {
			return b.checkIntents(ctx, st)
		}
		// Another process may have created it in between (the server then
		// answers "already in use" or "subjects overlap"): look again.
		var cerr error
		if st, cerr = b.js.Stream(ctx, sc.Name); cerr != nil {
			return fmt.Errorf("bus: create stream %s: %w", sc.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("bus: stream %s: %w", sc.Name, err)
	}
	cur := st.CachedInfo().Config
	var fixed []string
	if sc.MaxMsgsPerSubject > 0 && cur.MaxMsgsPerSubject != sc.MaxMsgsPerSubject {
		cur.MaxMsgsPerSubject = sc.MaxMsgsPerSubject
		fixed = append(fixed, "keeps one message per subject")
	}
	if sc.Name == wire.StreamIntents && !intentsDedupeOff(cur) {
		if !slices.ContainsFunc(cur.Sources, func(s *jetstream.StreamSource) bool { return s.Name == StreamIntentsAnchor }) {
			cur.Sources = append(cur.Sources, &jetstream.StreamSource{Name: StreamIntentsAnchor})
		}
		cur.Duplicates = 0
		fixed = append(fixed, "dedupes nothing by Nats-Msg-Id (sources from "+StreamIntentsAnchor+")")
	}
	// RESULTS' bound is named, not fixed: the services may not update
	// RESULTS (deploy/nats/nats.conf), and an update a server's permissions
	// refuse would hang until the start gives up.
	switch {
	case sc.Name != wire.StreamResults:
	case cur.MaxBytes <= 0:
		b.log.Warn().Str("stream", sc.Name).Int64("suggested_max_bytes", sc.MaxBytes).
			Msg("RESULTS has no byte bound: at a high rate an hour of results can fill the NATS server's store, which then takes no message on any stream; set one (nats stream edit RESULTS --max-bytes=4GiB --discard=old, docs/protocol.md)")
	case cur.Discard != jetstream.DiscardOld:
		b.log.Warn().Str("stream", sc.Name).Int64("max_bytes", cur.MaxBytes).
			Msg("RESULTS refuses new results when full (discard new): the relays' publishes then fail until results age out; make it drop its oldest (nats stream edit RESULTS --discard=old, docs/protocol.md)")
	}
	if sc.Name == wire.StreamIntents && cur.MaxBytes <= 0 {
		cur.MaxBytes = sc.MaxBytes
		fixed = append(fixed, fmt.Sprintf("holds at most %d bytes", sc.MaxBytes))
	}
	if sc.Name == wire.StreamIntents && cur.Discard != jetstream.DiscardNew {
		cur.Discard = jetstream.DiscardNew
		fixed = append(fixed, "refuses new intents when full instead of dropping stored ones")
	}
	if sc.Name == wire.StreamIntents && cur.Retention != jetstream.WorkQueuePolicy {
		b.log.Warn().Str("stream", sc.Name).Str("retention", cur.Retention.String()).
			Msg("INTENTS keeps every intent until its max age instead of until planner-ingest has it; JetStream cannot make an existing stream a work queue: once planner-ingest has caught up, delete the stream and it is made again (docs/protocol.md)")
	}
	if len(fixed) == 0 {
		return nil
	}
	if st, err = b.js.UpdateStream(ctx, cur); err != nil {
		return fmt.Errorf("bus: stream %s: %s: %w", sc.Name, strings.Join(fixed, ", "), err)
	}
	b.log.Warn().Str("stream", sc.Name).Strs("now", fixed).Msg("stream settings corrected")
	return b.checkIntents(ctx, st)
}

// checkIntents falls back to the shortest duplicate window should the
// server have given INTENTS one despite the anchor (a server that does not
// allow a stream without dedupe).
func (b *Bus) checkIntents(ctx context.Context, st jetstream.Stream) error {
	cur := st.CachedInfo().Config
	if cur.Name != wire.StreamIntents || cur.Duplicates <= IntentDuplicateWindow {
		return nil
	}
	b.log.Warn().Str("stream", cur.Name).Dur("duplicate_window_ms", cur.Duplicates).
		Msg("the NATS server keeps a Nats-Msg-Id duplicate window on INTENTS; shortening it to 100ms")
	cur.Duplicates = IntentDuplicateWindow
	if _, err := b.js.UpdateStream(ctx, cur); err != nil {
		return fmt.Errorf("bus: stream %s: duplicate window %s: %w", cur.Name, IntentDuplicateWindow, err)
	}
	return nil
}

// StreamCreated returns when the named stream was created on the server: a
// later time than seen before means the server lost it and it was made
// again (with none of its messages).
func (b *Bus) StreamCreated(ctx context.Context, name string) (time.Time, error) {
	st, err := b.js.Stream(ctx, name)
	if err != nil {
		return time.Time{}, fmt.Errorf("bus: stream %s: %w", name, err)
	}
	return st.CachedInfo().Created, nil
}

// StreamMissing reports whether a publish failed because no stream takes
// its subject (a NATS server that lost its store): EnsureStreams helps.
func StreamMissing(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrStreamNotFound)
}

// MessageFault reports whether a publish failed because of the message
// itself (larger than the server's payload limit, refused by the stream), so
// that publishing it again as it is cannot succeed. Transport failures
// (disconnected, timeout, no stream) are not message faults.
func MessageFault(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrInvalidMsg) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamNotFound:
			return false
		}
		// The server answered about this message (size, limits, a bad
		// header): it refused the message, not the connection.
		return apiErr.Code >= 400 && apiErr.Code < 500
	}
	return false
}

// Message is one message to publish.
type Message struct {
	Subject string
	// MsgID becomes Nats-Msg-Id: a re-publish inside the duplicate window is
	// stored once.
	MsgID  string
	Header map[string]string
	Data   []byte
}

func (m Message) natsMsg() *nats.Msg {
	nm := nats.NewMsg(m.Subject)
	nm.Data = m.Data
	for k, v := range m.Header {
		nm.Header.Set(k, v)
	}
	if m.MsgID != "" {
		nm.Header.Set(jetstream.MsgIDHeader, m.MsgID)
	}
	return nm
}

// Publish sends one message and waits for the stream's acknowledgement. It
// reports whether JetStream recognised it as a duplicate.
func (b *Bus) Publish(ctx context.Context, m Message) (duplicate bool, err error) {
	ack, err := b.js.PublishMsg(ctx, m.natsMsg())
	if err != nil {
		return false, fmt.Errorf("bus: publish %s: %w", m.Subject, err)
	}
	return ack.Duplicate, nil
}

// PublishBatch sends messages without waiting between them, then waits for
// every acknowledgement. errs[i] is nil when msgs[i] is stored (or was a
// duplicate of a stored message).
func (b *Bus) PublishBatch(ctx context.Context, msgs []Message) (errs []error) {
	errs = make([]error, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		f, err := b.js.PublishMsgAsync(m.natsMsg())
		if err != nil {
			errs[i] = fmt.Errorf("bus: publish %s: %w", m.Subject, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = fmt.Errorf("bus: publish %s: %w", msgs[i].Subject, err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("bus: publish %s: %w", msgs[i].Subject, ctx.Err())
		}
	}
	return errs
}

// Delivery is one received message.
type Delivery struct {
	Subject string
	Header  map[string]string
	Data    []byte
	// Delivered counts deliveries of this message, 1 on the first.
	Delivered uint64
}

// Handler processes a delivery. Returning nil acknowledges it; an error wrapped
// with Permanent terminates it (it will not be redelivered); any other error
// asks for redelivery after a backoff. ctx is not the context given to
// Consume: it is cancelled only when a stop has waited ShutdownGrace for the
// handler to return (see Consume), and a handler should then give up promptly.
type Handler func(ctx context.Context, d Delivery) error

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth redelivering the message for.
func Permanent(err error) error { return permanentError{err} }

type laterError struct {
	err   error
	delay time.Duration
}

func (e laterError) Error() string { return e.err.Error() }
func (e laterError) Unwrap() error { return e.err }

// RetryIn asks for the message to be redelivered after delay (capped at 5
// minutes) rather than after the usual backoff: the handler knows when the
// answer it waits for can come.
func RetryIn(err error, delay time.Duration) error {
	return laterError{err: err, delay: min(max(delay, 0), 5*time.Minute)}
}

// RetryDelay reports the delay a handler's error asked for with RetryIn,
// and whether it asked for one.
func RetryDelay(err error) (time.Duration, bool) {
	var later laterError
	if errors.As(err, &later) {
		return later.delay, true
	}
	return 0, false
}

// ConsumerConfig configures a durable pull consumer shared by every process
// that uses the same Durable name: each message goes to one of them.
type ConsumerConfig struct {
	Stream  string
	Durable string
	Filters []string
	// Workers process deliveries concurrently in this process (default 8).
	Workers int
	// AckWait is how long a delivery may be processed before JetStream
	// redelivers it (default 30s).
	AckWait time.Duration
	// MaxDeliver bounds deliveries (default -1, unlimited: the ledger decides).
	MaxDeliver int
	// MaxAckPending bounds deliveries in flight across the fleet (default 1024).
	MaxAckPending int
	// ShutdownGrace bounds how long stopping waits for in-flight handlers
	// before it cancels their context (default 30s). See Consume.
	ShutdownGrace time.Duration
	// CheckInterval is how often Consume checks that its stream and
	// consumer still exist on the server, recreating them if not (default 2s).
	CheckInterval time.Duration
	// Heartbeat is how often a delivery still being handled is reported in
	// progress to JetStream (default AckWait/3), so that AckWait can be short
	// (a dead process's messages come back soon) while a long vendor call
	// keeps its message. Handlers must therefore be bounded: every wait in
	// them needs a deadline, or a stuck handler holds its message for good.
	Heartbeat time.Duration
	// Ready, when set, tells whether what the handlers need (the ledger) is
	// reachable. After a handler fails, Consume asks it; while it fails,
	// the consumer is paused: it pulls nothing, Naks what it still holds
	// (after NakDelay) so the rest of the fleet takes it, and asks Ready
	// again every CheckInterval, consuming again once it succeeds.
	Ready func(ctx context.Context) error
	// ReadyTimeout bounds one call of Ready (default 2s).
	ReadyTimeout time.Duration
	// NakDelay is how long a message given back while paused waits before
	// it is redelivered (default 1s).
	NakDelay time.Duration
}

// Tuning holds the knobs of a consumer an operator may set (flags and
// environment of the services; see docs/architecture.md). Zero fields keep
// the service's defaults.
type Tuning struct {
	// AckWait: how long a delivery nobody reports on stays with its process.
	AckWait time.Duration
	// Heartbeat: how often a delivery in progress is reported (AckWait/3).
	Heartbeat time.Duration
	// NakDelay: how long a message given back while the ledger is
	// unreachable waits before redelivery.
	NakDelay time.Duration
}

// Apply returns c with t's non-zero fields set.
func (t Tuning) Apply(c ConsumerConfig) ConsumerConfig {
	if t.AckWait > 0 {
		c.AckWait = t.AckWait
	}
	if t.Heartbeat > 0 {
		c.Heartbeat = t.Heartbeat
	}
	if t.NakDelay > 0 {
		c.NakDelay = t.NakDelay
	}
	return c
}

// Consume starts processing deliveries with up to cfg.Workers concurrent
// calls of h. It runs until the returned stop function is called or ctx ends;
// when ctx ends, a goroutine calls stop itself.
//
// Handlers do not run with ctx: they get a context that carries ctx's values
// but neither its cancellation nor its deadline, so cancelling ctx (SIGTERM,
// a deploy) does not abort work in progress, such as a vendor call whose
// outcome would otherwise become unknown. That context is cancelled only by
// stop, and only as a last resort.
//
// stop, which is safe to call more than once and from several goroutines
// (every call returns once shutdown is complete), shuts down in this order:
//
//  1. It stops taking new messages: no message is handed to a worker from
//     then on (bar one a worker was already receiving at that instant, which
//     is handled like any other in-flight message), the subscription is
//     drained, and every message that still reaches this process, including
//     those already buffered in the client, is Nak'ed at once so that another
//     member of the fleet can take it without waiting for AckWait. Idle
//     workers exit.
//  2. It waits for in-flight handlers to return and for their messages to be
//     settled: Ack on nil, Term on Permanent, NakWithDelay otherwise (sent
//     without waiting for the server's confirmation, as always).
//  3. If they have not all returned within cfg.ShutdownGrace, it cancels their
//     context and waits again, without a bound, for them to return; a handler
//     that ignores its context therefore holds stop up. Their messages are
//     then settled as usual, typically with NakWithDelay.
//  4. It cancels the handlers' context (all have returned by now) and waits,
//     for what is left of cfg.ShutdownGrace, for the subscription to finish
//     draining. A callback the client delivers after that only Naks.
//
// Messages the server had already sent when the subscription closed, and
// that never reached this process, are redelivered after AckWait.
//
// A NATS server that lost its store (restarted on an empty directory) loses
// the streams and durable consumers with it. Consume notices within
// CheckInterval, recreates the streams (EnsureStreams with the options last
// given to this bus) and its consumer, and consumes again; commands lost
// with the store are written again by the maintenance leader's re-drive.
func (b *Bus) Consume(ctx context.Context, cfg ConsumerConfig, h Handler) (stop func(), err error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.MaxDeliver == 0 {
		cfg.MaxDeliver = -1
	}
	if cfg.MaxAckPending <= 0 {
		cfg.MaxAckPending = 1024
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 30 * time.Second
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = 2 * time.Second
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = cfg.AckWait / 3
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 2 * time.Second
	}
	if cfg.NakDelay <= 0 {
		cfg.NakDelay = time.Second
	}
	cc := jetstream.ConsumerConfig{
		Durable: cfg.Durable, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: cfg.AckWait, MaxDeliver: cfg.MaxDeliver, MaxAckPending: cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if len(cfg.Filters) == 1 {
		cc.FilterSubject = cfg.Filters[0] // servers before 2.10 know only the single filter
	} else {
		cc.FilterSubjects = cfg.Filters
	}
	cons, err := b.js.CreateOrUpdateConsumer(ctx, cfg.Stream, cc)
	if err != nil {
		return nil, fmt.Errorf("bus: consumer %s on %s: %w", cfg.Durable, cfg.Stream, err)
	}
	b.mu.Lock()
	b.bound = append(b.bound, boundConsumer{stream: cfg.Stream, durable: cfg.Durable})
	b.mu.Unlock()

	// hctx is the handlers' context: ctx's values, but cancelled only by stop.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	// stopping is closed when stop begins. It is the only shutdown signal the
	// Consume callback and the workers look at. work is never closed: the
	// client may still run the callback after its Closed channel fires, and
	// a send on a closed channel would panic.
	stopping := make(chan struct{})
	work := make(chan jetstream.Msg) // unbuffered: a message is either with a worker or still the callback's
	// paused is set while Ready fails: messages are given back, none pulled.
	var paused atomic.Bool
	pause := make(chan struct{}, 1) // wakes the watchdog to stop pulling
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case m := <-work:
					if paused.Load() {
						_ = m.NakWithDelay(cfg.NakDelay)
						continue
					}
					if b.handle(hctx, cfg, m, h) && cfg.Ready != nil && !paused.Load() {
						rctx, cancel := context.WithTimeout(hctx, cfg.ReadyTimeout)
						rerr := cfg.Ready(rctx)
						cancel()
						if rerr != nil && !paused.Swap(true) {
							b.log.Warn().Err(rerr).Str("consumer", cfg.Durable).
								Msg("what the handlers need is unreachable; pausing the consumer and giving its messages back")
							select {
							case pause <- struct{}{}:
							default:
							}
						}
					}
				case <-stopping:
					// Nothing can be pending here: work is unbuffered, so a
					// callback that did not hand its message over Naks it.
					return
				}
			}
		}()
	}
	isStopping := func() bool {
		select {
		case <-stopping:
			return true
		default:
			return false
		}
	}
	callback := func(m jetstream.Msg) {
		if isStopping() {
			_ = m.Nak()
			return
		}
		if paused.Load() {
			_ = m.NakWithDelay(cfg.NakDelay)
			return
		}
		select {
		case work <- m:
		case <-stopping:
			_ = m.Nak()
		}
	}
	lost := make(chan struct{}, 1) // the client saw the consumer go
	consume := func(cons jetstream.Consumer) (jetstream.ConsumeContext, error) {
		return cons.Consume(callback, jetstream.PullMaxMessages(2*cfg.Workers), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if isStopping() || ctx.Err() != nil {
				return
			}
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				select {
				case lost <- struct{}{}:
				default:
				}
			}
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				b.log.Debug().Err(err).Str("consumer", cfg.Durable).Msg("consume")
			}
		}))
	}
	first, err := consume(cons)
	if err != nil {
		close(stopping)
		wg.Wait()
		hcancel()
		return nil, fmt.Errorf("bus: consume %s: %w", cfg.Durable, err)
	}
	var ccMu sync.Mutex
	consumeCtx := first
	current := func() jetstream.ConsumeContext {
		ccMu.Lock()
		defer ccMu.Unlock()
		return consumeCtx
	}
	// The watchdog puts the stream and consumer back when the server lost them.
	watchdogDone := make(chan struct{})
	go func() {
		defer close(watchdogDone)
		t := time.NewTicker(cfg.CheckInterval)
		defer t.Stop()
		for {
			select {
			case <-stopping:
				return
			case <-t.C:
			case <-lost:
			case <-pause:
				// Stop pulling; Drain hands what the client holds to the
				// callback, which gives it back.
				ccMu.Lock()
				consumeCtx.Drain()
				ccMu.Unlock()
				continue
			}
			if paused.Load() {
				rctx, rcancel := context.WithTimeout(hctx, cfg.ReadyTimeout)
				rerr := cfg.Ready(rctx)
				rcancel()
				if rerr != nil {
					continue
				}
				ccMu.Lock()
				if !isStopping() {
					if next, err := consume(cons); err == nil {
						consumeCtx = next
						paused.Store(false)
						b.log.Info().Str("consumer", cfg.Durable).Msg("reachable again; consuming")
					} else {
						b.log.Warn().Err(err).Str("consumer", cfg.Durable).Msg("could not resume consuming; will try again")
					}
				}
				ccMu.Unlock()
				continue
			}
			cctx, cancel := context.WithTimeout(hctx, 5*time.Second)
			_, err := b.js.Consumer(cctx, cfg.Stream, cfg.Durable)
			if !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
				cancel()
				continue // there, or the server is unreachable: nothing to recreate
			}
			b.log.Warn().Str("consumer", cfg.Durable).Str("stream", cfg.Stream).Err(err).Msg("consumer gone from the NATS server; recreating it")
			b.mu.Lock()
			so := b.streams
			b.mu.Unlock()
			err = b.EnsureStreams(cctx, so)
			var next jetstream.ConsumeContext
			if err == nil {
				var c jetstream.Consumer
				if c, err = b.js.CreateOrUpdateConsumer(cctx, cfg.Stream, cc); err == nil {
					ccMu.Lock()
					if !isStopping() {
						consumeCtx.Stop()
						if next, err = consume(c); err == nil {
							consumeCtx = next
						}
					}
					ccMu.Unlock()
				}
			}
			cancel()
			if err != nil {
				b.log.Warn().Err(err).Str("consumer", cfg.Durable).Msg("could not recreate the consumer; will try again")
			}
		}
	}()

	var once sync.Once
	stop = func() {
		once.Do(func() {
			deadline := time.Now().Add(cfg.ShutdownGrace)
			// 1. Take no new messages; buffered ones reach the callback and are Nak'ed.
			close(stopping)
			<-watchdogDone
			current().Drain()

			// 2. and 3. Wait for in-flight handlers, cancelling them after the grace.
			handlersDone := make(chan struct{})
			go func() {
				wg.Wait()
				close(handlersDone)
			}()
			grace := time.NewTimer(time.Until(deadline))
			select {
			case <-handlersDone:
			case <-grace.C:
				b.log.Warn().Str("consumer", cfg.Durable).Dur("grace_ms", cfg.ShutdownGrace).
					Msg("handlers still running after the shutdown grace; cancelling them")
				hcancel()
				<-handlersDone
			}
			grace.Stop()

			// 4. Release the context and let the subscription finish draining.
			hcancel()
			drained := time.NewTimer(max(time.Until(deadline), 0))
			select {
			case <-current().Closed():
			case <-drained.C:
			}
			drained.Stop()
		})
	}
	go func() {
		select {
		case <-ctx.Done():
			stop()
		case <-stopping:
		}
	}()
	return stop, nil
}

// call runs h, turning a panic into an error that redelivers the message
// (the ledger makes a redelivery safe): a bug in one handler must not crash
// the process and every message it holds. The panic's value, which may
// quote a message, an argument or a vendor's answer, is never logged: only
// its type and the stack, whose frames show no values.
func (b *Bus) call(ctx context.Context, cfg ConsumerConfig, h Handler, d Delivery) (err error) {
	defer func() {
		if v := recover(); v != nil {
			b.log.Error().Str("consumer", cfg.Durable).Str("subject", d.Subject).Str("panic_type", fmt.Sprintf("%T", v)).
				Str("stack", string(debug.Stack())).Msg("handler panicked; the message will be redelivered")
			err = fmt.Errorf("handler panicked (%T): %w", v, errPanicked)
		}
	}()
	return h(ctx, d)
}

// errPanicked: a handler panicked (Bus.call).
var errPanicked = errors.New("see the panic logged with its stack")

// handle runs h on m and settles m; it reports whether h failed with an
// error that asks for redelivery.
func (b *Bus) handle(ctx context.Context, cfg ConsumerConfig, m jetstream.Msg, h Handler) (failed bool) {
	d := Delivery{Subject: m.Subject(), Data: m.Data(), Delivered: 1}
	if hdr := m.Headers(); len(hdr) > 0 {
		d.Header = make(map[string]string, len(hdr))
		for k := range hdr {
			d.Header[k] = hdr.Get(k)
		}
	}
	if md, err := m.Metadata(); err == nil {
		d.Delivered = md.NumDelivered
	}
	beat := time.NewTicker(cfg.Heartbeat)
	done := make(chan struct{})
	go func() {
		defer beat.Stop()
		for {
			select {
			case <-done:
				return
			case <-beat.C:
				_ = m.InProgress() // fire and forget: a lost one costs AckWait at worst
			}
		}
	}()
	err := b.call(ctx, cfg, h, d)
	close(done)
	var perm permanentError
	switch {
	case err == nil:
		if aerr := m.Ack(); aerr != nil {
			b.log.Warn().Err(aerr).Str("consumer", cfg.Durable).Msg("ack failed; the message will be redelivered and absorbed by the ledger")
		}
	case errors.As(err, &perm):
		b.log.Warn().Err(err).Str("consumer", cfg.Durable).Str("subject", d.Subject).Msg("message terminated")
		_ = m.Term()
	default:
		delay := time.Duration(d.Delivered*d.Delivered) * 100 * time.Millisecond
		if delay > 10*time.Second {
			delay = 10 * time.Second
		}
		var later laterError
		if errors.As(err, &later) {
			delay = later.delay
		}
		if ctx.Err() == nil {
			b.log.Warn().Err(err).Str("consumer", cfg.Durable).Str("subject", d.Subject).Uint64("delivered", d.Delivered).Msg("handler failed; redelivering")
		}
		_ = m.NakWithDelay(delay)
		return true
	}
	return false
}

// Unclaimed returns how many messages of stream the durable consumer's fleet
// has not taken yet (JetStream's NumPending): work waiting for capacity.
func (b *Bus) Unclaimed(ctx context.Context, stream, durable string) (uint64, error) {
	c, err := b.js.Consumer(ctx, stream, durable)
	if err != nil {
		return 0, err
	}
	return c.CachedInfo().NumPending, nil
}
