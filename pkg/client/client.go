// Package client is a small Go client for agents. It speaks only the
// documented wire protocol (docs/protocol.md), so anything it does, a client
// in another language can do.
//
//   - [Client.Submit] publishes an intent and returns the ledger's answer to
//     its event id (new, duplicate_event, duplicate_operation, conflict or
//     rejected).
//   - [Client.SubmitAndWait] publishes an intent and waits until the
//     operation it maps to is final, or waits on a person.
//   - [Client.Watch] and [Client.Results] stream the results of a workflow,
//     with repeats dropped and each operation's results in version order.
//   - [Client.Publish] sends an intent as it is and only waits for JetStream
//     to store it.
//
// Every channel the client returns is closed when its context ends or the
// client is closed, and the goroutine feeding it has ended or is ending.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// ErrClosed is returned by a call made on, or interrupted by, a closed
// client (Close was called, or the NATS connection closed for good).
var ErrClosed = errors.New("client: closed")

// ErrIntentsFull is returned by a publish that JetStream refused because
// the INTENTS stream is full: the intents opledger has not yet taken into
// its ledger reached the stream's bound (1 GiB by default, see
// docs/protocol.md). Nothing of the intent was stored; publishing it again
// later, with the same event id, is safe. It wraps op.ErrRetryable.
var ErrIntentsFull = fmt.Errorf("client: the INTENTS stream is full (opledger is behind); the intent was not stored, publish it again later: %w", op.ErrRetryable)

// Client publishes intents and reads results. It is safe for concurrent use.
type Client struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	tenant string

	// life ends when Close is called or the connection closes for good; every
	// subscription's context is tied to it.
	life context.Context
	end  context.CancelFunc

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup // goroutines feeding channels and removing consumers
}

// Option configures a client.
type Option func(*settings)

type settings struct {
	tenant string
	nats   []nats.Option
}

// Tenant makes the client publish and read as tenant: intents go to
// opledger.intents.<tenant>.<workflow_id> and answers are read from
// opledger.results.<tenant>.<workflow_id>. Without it the client uses the
// default tenant's subjects. Which tenant an agent may use is up to the NATS
// server's permissions (docs/security.md).
func Tenant(tenant string) Option { return func(s *settings) { s.tenant = tenant } }

// NATSOptions passes connection options to nats.Connect: credentials
// (nats.UserCredentials, nats.UserInfo, nats.Token, nats.Nkey), TLS
// (nats.RootCAs, nats.ClientCert) and the like. nats.CustomInboxPrefix
// here replaces the client's default inbox, InboxPrefix(tenant).
func NATSOptions(o ...nats.Option) Option {
	return func(s *settings) { s.nats = append(s.nats, o...) }
}

// Connect dials NATS at url; name is the connection's name in the server's
// monitoring. It returns an error if the server cannot be reached or an
// option is invalid.
func Connect(url, name string, opts ...Option) (*Client, error) {
	var st settings
	for _, o := range opts {
		o(&st)
	}
	if st.tenant == "" {
		st.tenant = wire.DefaultTenant
	}
	if !wire.ValidTenant(st.tenant) {
		return nil, fmt.Errorf("client: tenant %q: want 1-63 lower-case letters, digits, '_' or '-'", wire.Clip(st.tenant))
	}
	life, end := context.WithCancel(context.Background())
	// Replies (JetStream acks, pulled results) come to the tenant's own
	// inbox, _INBOX_<tenant>, which a server can allow to the tenant's
	// agents alone (docs/security.md); nats.CustomInboxPrefix in
	// NATSOptions overrides it.
	nopts := append([]nats.Option{nats.Name(name), nats.CustomInboxPrefix(InboxPrefix(st.tenant))}, st.nats...)
	nopts = append(nopts, nats.ClosedHandler(func(*nats.Conn) { end() }))
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		end()
		return nil, fmt.Errorf("client: connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		end()
		return nil, fmt.Errorf("client: jetstream: %w", err)
	}
	return &Client{nc: nc, js: js, tenant: st.tenant, life: life, end: end}, nil
}

// InboxPrefix is the prefix of a tenant's clients' reply subjects:
// _INBOX_<tenant> (_INBOX_default for the default tenant).
func InboxPrefix(tenant string) string {
	if tenant == "" {
		tenant = wire.DefaultTenant
	}
	return "_INBOX_" + tenant
}

// EnsureResultsStream creates the RESULTS stream the client reads from,
// capturing its tenant's results, where no RESULTS stream exists yet. It
// is for a server where each tenant has an account of its own into which
// the services' results are imported (deploy/nats/nats.conf): there the
// tenant keeps its own copy of its results. Where the services' RESULTS
// stream is visible (one account for everyone) it finds that stream and
// changes nothing; but do not call it there before the services have
// started: a RESULTS made by a client first would take only its tenant's
// subjects, and the services would keep it as they found it. maxAge
// bounds how long results are kept (0: one hour), and the stream holds at
// most TenantResultsMaxBytes, dropping its oldest results when full, so
// that new results still come in (an agent that finds its result gone
// sends the intent again and is answered from the ledger). Where the
// tenant's account allows less storage than that, the bound is halved
// until it fits (CreateBoundedStream).
func (c *Client) EnsureResultsStream(ctx context.Context, maxAge time.Duration) error {
	if maxAge <= 0 {
		maxAge = time.Hour
	}
	if _, err := c.js.Stream(ctx, wire.StreamResults); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("client: results stream: %w", err)
	}
	sc := jetstream.StreamConfig{Name: wire.StreamResults, Subjects: []string{c.AllResults()},
		MaxAge: maxAge, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage,
		MaxBytes: TenantResultsMaxBytes, Discard: jetstream.DiscardOld}
	if _, err := CreateBoundedStream(ctx, c.js, sc, MinResultsMaxBytes); err != nil {
		if _, again := c.js.Stream(ctx, wire.StreamResults); again == nil {
			return nil // another agent of the tenant made it in between
		}
		return fmt.Errorf("client: create results stream: %w", err)
	}
	return nil
}

// ResultSubject is where this client's tenant receives the results of a
// workflow: the filter for Watch and Results.
func (c *Client) ResultSubject(workflowID string) string {
	return wire.TenantResultSubject(c.tenant, workflowID)
}

// AllResults is the filter matching every result of the client's tenant.
func (c *Client) AllResults() string {
	if c.tenant == wire.DefaultTenant {
		return wire.ResultSubjectPrefix + "*"
	}
	return wire.TenantResultFilter(c.tenant)
}

// Close closes every channel the client returned, waits for the goroutines
// feeding them to end, and closes the connection. Calls in progress return
// ErrClosed. Close may be called more than once.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.end()
	c.wg.Wait()
	c.nc.Close()
}

// begin registers a goroutine of the client, or returns ErrClosed.
func (c *Client) begin() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.life.Err() != nil {
		return ErrClosed
	}
	c.wg.Add(1)
	return nil
}

// scope returns a context that ends with ctx or with the client.
func (c *Client) scope(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.life, cancel)
	return ctx, func() { stop(); cancel() }
}

// ended reports whether a scope from c.scope has ended, or is ending: the
// client's end reaches the scope in a goroutine of its own, so a call cut
// off by Close (its connection closed) may fail before its scope ends.
func (c *Client) ended(scope context.Context) bool {
	return scope.Err() != nil || c.life.Err() != nil
}

// cause says why a scoped wait ended: the caller's context error, or
// ErrClosed when the client went away first.
func cause(user context.Context) error {
	if err := user.Err(); err != nil {
		return err
	}
	return ErrClosed
}

// Publish sends an intent to the tenant's intent subject for its workflow
// (opledger.intents.<workflow_id> for the default tenant) and waits for
// JetStream to store it. It fills an empty Spec but does not validate the
// intent: opledger answers a malformed one with a rejection (Submit checks
// first). traceparent may be empty.
//
// The intent carries no Nats-Msg-Id: the ledger dedupes event ids per
// tenant, and opledger's INTENTS stream keeps no duplicate window (a
// stream-wide dedupe would let anyone publishing the same id a moment
// earlier, in any tenant, drop this intent). Publishing the same event id
// twice is safe: the ledger's inbox answers the second duplicate_event.
func (c *Client) Publish(ctx context.Context, in wire.Intent, traceparent string) error {
	if in.Spec == "" {
		in.Spec = wire.SpecIntent
	}
	data, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("client: encode intent: %w", err)
	}
	return c.publish(ctx, in, data, traceparent)
}

func (c *Client) publish(ctx context.Context, in wire.Intent, data []byte, traceparent string) error {
	m := nats.NewMsg(wire.TenantIntentSubject(c.tenant, in.WorkflowID))
	m.Data = data
	if traceparent != "" {
		m.Header.Set(wire.HeaderTraceparent, traceparent)
	}
	if _, err := c.js.PublishMsg(ctx, m); err != nil {
		if storeFull(err) {
			return fmt.Errorf("client: publish intent %s: %w", wire.Clip(in.EventID), ErrIntentsFull)
		}
		return fmt.Errorf("client: publish intent %s: %w", wire.Clip(in.EventID), err)
	}
	return nil
}

// subscription reads the RESULTS stream through one ordered consumer.
type subscription struct {
	c    *Client
	cons jetstream.Consumer
	it   jetstream.MessagesContext
	// before is how many messages of the filter the stream held when the
	// consumer was made: the first ones delivered were there before.
	before uint64
	// earlierThan, when set, replaces before: a message whose stream
	// sequence is below it was in the stream before the call's first
	// subscription, which read from there on (fromNew).
	earlierThan uint64
	// last is the stream sequence of the last message read (0 before any).
	last uint64
}

// from says where a subscription starts reading RESULTS: at the start of the
// stream (fromStart), with what is stored after it is made (fromNew), or at
// a time (since).
type from struct {
	newOnly bool
	since   time.Time
}

var (
	fromStart = from{}
	fromNew   = from{newOnly: true}
)

func since(t time.Time) from { return from{since: t} }

// subscribe creates an ordered consumer on RESULTS for filter, delivering
// from where f says. The consumer exists on the server when subscribe
// returns, so nothing published afterwards can be missed.
//
// fromNew starts at the sequence after the stream's last message, read
// first, rather than with JetStream's "deliver new": an ordered consumer
// that is reset (a missed heartbeat, a restarted server) before it
// delivered anything is made again with its first policy, and "new" would
// then skip what was stored in between, such as the answer the call waits
// for.
func (c *Client) subscribe(ctx context.Context, filter string, f from) (*subscription, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}}
	var startSeq uint64
	switch {
	case f.newOnly:
		st, err := c.js.Stream(ctx, wire.StreamResults)
		if err != nil {
			return nil, fmt.Errorf("client: results stream: %w", err)
		}
		startSeq = st.CachedInfo().State.LastSeq + 1
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = startSeq
	case !f.since.IsZero():
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		cfg.OptStartTime = &f.since
	}
	cons, err := c.js.OrderedConsumer(ctx, wire.StreamResults, cfg)
	if err != nil {
		return nil, fmt.Errorf("client: results consumer for %s: %w", wire.Clip(filter), err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("client: results for %s: %w", wire.Clip(filter), err)
	}
	sub := &subscription{c: c, cons: cons, it: it, earlierThan: startSeq}
	if info := cons.CachedInfo(); info != nil {
		sub.before = info.NumPending
	}
	return sub, nil
}

// next returns the next message of the subscription as a result (ok is
// false when it is not a v1 result) and how many messages of the filter the
// stream held after it. It fails when ctx ends or the subscription cannot go
// on (the connection closed).
func (s *subscription) next(ctx context.Context) (r Result, ok bool, pending uint64, err error) {
	m, err := s.it.Next(jetstream.NextContext(ctx))
	if err != nil {
		return Result{}, false, 0, err
	}
	earlier := false
	if md, err := m.Metadata(); err == nil {
		pending = md.NumPending
		s.last = md.Sequence.Stream
		if s.earlierThan > 0 {
			earlier = s.last < s.earlierThan
		} else {
			earlier = md.Sequence.Consumer <= s.before
		}
	}
	r, ok = decodeResult(m.Headers(), m.Data())
	r.Earlier = earlier
	return r, ok && s.c.own(m.Subject(), r), pending, nil
}

// own reports whether a result is the client's tenant's: published on one
// of its subjects and saying so. Any other (a filter naming another
// tenant's subjects, a server that lets them through) is skipped like a
// message that is not a result.
func (c *Client) own(subject string, r Result) bool {
	if r.Tenant != wire.ResultTenant(c.tenant) {
		return false
	}
	rest, ok := strings.CutPrefix(subject, wire.ResultSubjectPrefix)
	if !ok {
		return false
	}
	if c.tenant == wire.DefaultTenant {
		return !strings.Contains(rest, ".")
	}
	return strings.HasPrefix(rest, c.tenant+".")
}

// stop ends the subscription and removes its consumer from the server in the
// background (the server would drop it after minutes of inactivity anyway).
func (s *subscription) stop() {
	s.it.Stop()
	info := s.cons.CachedInfo()
	if info == nil || s.c.begin() != nil {
		return
	}
	go func() {
		defer s.c.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.c.js.DeleteConsumer(ctx, wire.StreamResults, info.Name)
	}()
}
