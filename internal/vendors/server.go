// Package vendors runs local stand-ins for the vendors opledger calls —
// payments, email, tickets, accounts and a CRM — as one real HTTP server on
// loopback, for demos, tests and benchmarks.
//
// Each stand-in behaves like the kind of vendor it imitates (payments honours
// Idempotency-Key like Stripe, email sends on every call like a plain relay),
// counts every side effect it really performs, and can be told to misbehave
// (time out, fail, reset the connection) before or after committing an effect.
// The counts are the ground truth that tests and the end-to-end suite assert on:
// exactly one side effect per distinct operation.
//
// HTTP surface (all JSON, except the form-encoded payment intent body; every
// vendor route answers with a Request-Id header):
//
//	POST /v1/payments/capture        Idempotency-Key; 200 charge {"id":"ch_…","status":"succeeded",…}
//	GET  /v1/payments?idempotency_key=K      200 charge | 404 {"error":"not_found"}
//	POST /v1/payment_intents         form-encoded, Stripe-like (see intents.go); Idempotency-Key;
//	                                 200 {"id":"pi_…","object":"payment_intent","status":"succeeded",…}
//	GET  /v1/payment_intents?idempotency_key=K
//	                                 200 intent | 404 {"error":{"type":"invalid_request_error","code":"resource_missing",…}}
//	POST /v1/refunds                 Idempotency-Key; {"charge_id"|"order_id","amount_cents","customer_id"?}
//	GET  /v1/refunds?idempotency_key=K
//	POST /v1/accounts/{account_id}/credits   Idempotency-Key; strict {"amount_cents","reason"};
//	                                 201 {"id":"cr_…","status":"applied",…}
//	GET  /v1/credits?idempotency_key=K
//	POST /v1/messages                no idempotency; X-Client-Reference stored; 202 {"id":"msg_…","status":"queued"}
//	GET  /v1/messages?client_reference=R     first message sent with R
//	POST /v1/tickets                 Idempotency-Key; 201 {"id":"tk_…","status":"open"}
//	GET  /v1/tickets?idempotency_key=K
//	GET  /v1/accounts/{account_id}   200 {"id","status":"active"}; "missing_…" 404, "closed_…" closed
//	PUT  /v1/crm/records/{record_id} Idempotency-Key; merge upsert, {"changed":bool,"version":n}
//	GET  /v1/crm/records/{record_id}
//	GET  /_admin/stats               Stats
//	GET  /_admin/effects?kind=K      EffectsByKey(K)
//	GET  /_admin/effects?kind=K&by=A EffectsBy(K, A), e.g. kind=email&by=mailbox
//	GET  /_admin/crm/{record_id}     CRMRecord: 200 {"id","version","fields"} | 404
//	GET  /_admin/activity?customer=C Activities(C)
//	POST /_admin/faults              {"route":"capture","fault":"timeout_after_commit","times":1,"delay_ms":0}
//	                                 (webhook faults, e.g. "webhook_delay", apply to the route's webhooks; see webhooks.go)
//	DELETE /_admin/faults            ClearFaults
//	POST /_admin/reset               Reset
//
// The /_admin/ routes answer only requests from a loopback address (403
// otherwise), wherever the server listens: they are for development.
//
// Request bodies are never logged.
package vendors

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/opledger/opledger/pkg/op"
)

// Effect kinds, the argument of EffectsByKey.
const (
	KindCapture       = "capture"        // key: Idempotency-Key, else order_id
	KindPaymentIntent = "payment_intent" // key: Idempotency-Key, else metadata[order_id]
	KindRefund        = "refund"         // key: Idempotency-Key, else the refunded charge id
	KindEmail         = "email"          // key: X-Client-Reference, else "to|template"
	KindTicket        = "ticket"         // key: Idempotency-Key, else conversation_id
	KindCRM           = "crm"            // key: Idempotency-Key, else record id; only writes that changed the record
	KindCredit        = "credit"         // key: Idempotency-Key, else the account id
)

// Effect attributes, the second argument of EffectsBy: a request value that
// effects are also counted by. Replays and refusals are not counted.
const (
	// AttrTo (KindEmail) is the recipient exactly as received.
	AttrTo = "to"
	// AttrMailbox (KindEmail) is the mailbox a message reaches: the
	// recipient's address (the part in <…> for "Name <addr>") lower-cased,
	// as a mail server delivers "Victim@Example.COM" and
	// "victim@example.com" to one mailbox. Nothing else is normalized.
	AttrMailbox = "mailbox"
	// AttrOrderID (KindCapture, KindPaymentIntent) is the order a charge is
	// for: a capture's order_id, a payment intent's metadata[order_id].
	AttrOrderID = "order_id"
)

// Routes, the names faults match on.
const (
	RouteCapture             = "capture"               // POST /v1/payments/capture
	RouteCaptureLookup       = "capture_lookup"        // GET  /v1/payments?idempotency_key=K
	RoutePaymentIntent       = "payment_intent"        // POST /v1/payment_intents
	RoutePaymentIntentLookup = "payment_intent_lookup" // GET  /v1/payment_intents?idempotency_key=K
	RouteRefund              = "refund"                // POST /v1/refunds
	RouteRefundLookup        = "refund_lookup"         // GET  /v1/refunds?idempotency_key=K
	RouteEmail               = "email"                 // POST /v1/messages
	RouteEmailLookup         = "email_lookup"          // GET  /v1/messages?client_reference=R
	RouteTicket              = "ticket"                // POST /v1/tickets
	RouteTicketLookup        = "ticket_lookup"         // GET  /v1/tickets?idempotency_key=K
	RouteAccount             = "account"               // GET  /v1/accounts/{account_id}
	RouteCRM                 = "crm"                   // PUT  /v1/crm/records/{record_id}
	RouteCRMGet              = "crm_get"               // GET  /v1/crm/records/{record_id}
	RouteCredit              = "credit"                // POST /v1/accounts/{account_id}/credits
	RouteCreditLookup        = "credit_lookup"         // GET  /v1/credits?idempotency_key=K
	// RouteAny matches every route above.
	RouteAny = "*"
)

var routes = []string{
	RouteCapture, RouteCaptureLookup, RoutePaymentIntent, RoutePaymentIntentLookup,
	RouteRefund, RouteRefundLookup, RouteEmail, RouteEmailLookup,
	RouteTicket, RouteTicketLookup, RouteAccount, RouteCRM, RouteCRMGet,
	RouteCredit, RouteCreditLookup,
}

// Options configures Start. The zero value is a silent, instant server on a
// random loopback port.
type Options struct {
	// Addr to listen on; default 127.0.0.1:0 (a free random port).
	Addr string
	// Latency delays every vendor request (not /_admin) before it is handled.
	Latency time.Duration
	// Stall is how long the timeout faults hold a connection whose client has
	// not given up yet before closing it without an answer; default 10s.
	Stall time.Duration
	// EmailQueueDelay is how long a sent message reports "queued" on lookup
	// before it reports "delivered"; 0 means delivered at once.
	EmailQueueDelay time.Duration
	// APIKey, when set, is required as "Authorization: Bearer <APIKey>" on
	// every vendor route (not /_admin); a wrong or missing one gets 401.
	APIKey string
	// Logger receives fault and lifecycle lines, never bodies; the zero value logs nothing.
	Logger zerolog.Logger
}

// Server is the running stand-in. It is safe for concurrent use.
type Server struct {
	opts Options
	http *http.Server
	url  string
	done chan struct{} // closed by Close; wakes stalled handlers
	once sync.Once

	mu sync.Mutex
	st *state
	// webhooks is where the stand-ins send webhooks (SetWebhooks).
	webhooks WebhookTarget

	busy inflight // requests being handled (WaitIdle)
}

// Start listens and serves until Close. Invalid options return an error
// wrapping op.ErrInvalid.
func Start(opts Options) (*Server, error) {
	if opts.Latency < 0 || opts.Stall < 0 || opts.EmailQueueDelay < 0 {
		return nil, fmt.Errorf("vendors: negative duration in options: %w", op.ErrInvalid)
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.Stall == 0 {
		opts.Stall = 10 * time.Second
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("vendors: listen: %w", err)
	}
	s := &Server{
		opts: opts,
		url:  "http://" + ln.Addr().String(),
		done: make(chan struct{}),
		st:   newState(),
	}
	s.http = &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute, // longer than Go clients' 90s, so clients close idle conns first
		ErrorLog:          log.New(opts.Logger, "", 0),
	}
	go func() { _ = s.http.Serve(ln) }() // returns http.ErrServerClosed on Close
	return s, nil
}

// URL is the base URL, e.g. http://127.0.0.1:41234.
func (s *Server) URL() string { return s.url }

// Handler is the server's handler, for requests made in-process (tests
// that choose the remote address).
func (s *Server) Handler() http.Handler { return s.http.Handler }

// Close stops the server at once, like a vendor going down: the listener and
// every connection are closed and stalled requests released. Effects already
// committed stay counted. It is safe to call more than once.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.done)
		_ = s.http.Close() // only reports listener close errors, nothing to act on
	})
}

// Reset forgets every charge, message, ticket, record, idempotency key,
// count and pending fault, as if freshly started.
func (s *Server) Reset() {
	s.mu.Lock()
	s.st = newState()
	s.mu.Unlock()
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.st.stats
	out.Requests = make(map[string]int, len(s.st.stats.Requests))
	for k, v := range s.st.stats.Requests {
		out.Requests[k] = v
	}
	return out
}

// EffectsByKey returns, for one effect kind (KindCapture, KindEmail, …), how
// many effects were performed per key; see the Kind constants for what the
// key is. An unknown kind returns an empty map. The map is a copy.
func (s *Server) EffectsByKey(kind string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.st.effects[kind]))
	for k, v := range s.st.effects[kind] {
		out[k] = v
	}
	return out
}

// EffectsBy returns, for one effect kind, how many effects were performed
// per value of one request attribute; see the Attr constants for which kind
// has which. An unknown kind or attribute returns an empty map. The map is a
// copy.
func (s *Server) EffectsBy(kind, attr string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.st.values[kind][attr]))
	for k, v := range s.st.values[kind][attr] {
		out[k] = v
	}
	return out
}

// Stats counts what the server did. Captures, PaymentIntents, Refunds,
// Emails, Tickets, CRMWrites and Credits are side effects really performed;
// replays and refusals are not.
type Stats struct {
	Captures       int `json:"captures"`
	PaymentIntents int `json:"payment_intents"`
	Refunds        int `json:"refunds"`
	Emails         int `json:"emails"`
	Tickets        int `json:"tickets"`
	CRMWrites      int `json:"crm_writes"`
	Credits        int `json:"credits"`
	// AccountReads counts successful account reads (no side effect).
	AccountReads int `json:"account_reads"`
	// Replays counts answers served from an idempotency key's stored response.
	Replays int `json:"replays"`
	// Conflicts counts refusals of a known idempotency key sent with a
	// different request (422; 400 on payment intents).
	Conflicts int `json:"conflicts"`
	// Unkeyed counts effects performed for requests without an Idempotency-Key
	// on routes that accept one (payments, payment intents, tickets, CRM,
	// credits).
	Unkeyed int `json:"unkeyed"`
	// FaultsFired counts injected faults that were applied.
	FaultsFired int `json:"faults_fired"`
	// WebhooksSent counts webhook sends (each retry and duplicate too);
	// WebhooksDelivered, WebhooksRefused and WebhooksFailed count
	// deliveries answered 2xx, answered 4xx, and given up.
	WebhooksSent      int `json:"webhooks_sent"`
	WebhooksDelivered int `json:"webhooks_delivered"`
	WebhooksRefused   int `json:"webhooks_refused"`
	WebhooksFailed    int `json:"webhooks_failed"`
	// Requests counts authorized vendor requests per route name (Route
	// constants), faulted ones included.
	Requests map[string]int `json:"requests"`
}

// state is everything Reset forgets. Guarded by Server.mu.
type state struct {
	stats  Stats
	faults []*pendingFault
	// webhookFaults apply to the webhooks of a route's effects.
	webhookFaults []*pendingFault
	effects       map[string]map[string]int
	// values counts effects per kind, attribute and attribute value (EffectsBy).
	values map[string]map[string]map[string]int
	// keys holds stored responses per idempotency scope (a route) and key.
	keys map[string]map[string]*idemEntry

	charges        map[string]*charge
	chargesByOrder map[string][]*charge
	intents        map[string]*paymentIntent
	refunds        map[string]*refund
	messages       map[string]*message
	messageByRef   map[string][]*message // every message per X-Client-Reference, oldest first
	tickets        map[string]*ticket
	records        map[string]*record
	credits        map[string]*credit
	// activities are the customer requests answered so far (Activities),
	// oldest first, at most maxActivities.
	activities []Activity
}

func newState() *state {
	return &state{
		stats:          Stats{Requests: map[string]int{}},
		effects:        map[string]map[string]int{},
		values:         map[string]map[string]map[string]int{},
		keys:           map[string]map[string]*idemEntry{},
		charges:        map[string]*charge{},
		chargesByOrder: map[string][]*charge{},
		intents:        map[string]*paymentIntent{},
		refunds:        map[string]*refund{},
		messages:       map[string]*message{},
		messageByRef:   map[string][]*message{},
		tickets:        map[string]*ticket{},
		records:        map[string]*record{},
		credits:        map[string]*credit{},
	}
}

// keyedEffect records one effect of kind under the request's idempotency key,
// or, for a request without one, under fallback (and counts it unkeyed).
func (st *state) keyedEffect(kind, key, fallback string) {
	if key == "" {
		st.stats.Unkeyed++
		key = fallback
	}
	st.effect(kind, key)
}

func (st *state) effect(kind, key string) {
	m := st.effects[kind]
	if m == nil {
		m = map[string]int{}
		st.effects[kind] = m
	}
	m[key]++
}

// countBy counts one effect of kind under value of attr (an Attr constant).
func (st *state) countBy(kind, attr, value string) {
	byAttr := st.values[kind]
	if byAttr == nil {
		byAttr = map[string]map[string]int{}
		st.values[kind] = byAttr
	}
	m := byAttr[attr]
	if m == nil {
		m = map[string]int{}
		byAttr[attr] = m
	}
	m[value]++
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments/capture", s.endpoint(RouteCapture, s.capture))
	mux.Handle("GET /v1/payments", s.endpoint(RouteCaptureLookup, s.captureLookup))
	mux.Handle("POST /v1/payment_intents", s.endpoint(RoutePaymentIntent, s.paymentIntent))
	mux.Handle("GET /v1/payment_intents", s.endpoint(RoutePaymentIntentLookup, s.paymentIntentLookup))
	mux.Handle("POST /v1/refunds", s.endpoint(RouteRefund, s.refund))
	mux.Handle("GET /v1/refunds", s.endpoint(RouteRefundLookup, s.refundLookup))
	mux.Handle("POST /v1/messages", s.endpoint(RouteEmail, s.email))
	mux.Handle("GET /v1/messages", s.endpoint(RouteEmailLookup, s.emailLookup))
	mux.Handle("POST /v1/tickets", s.endpoint(RouteTicket, s.ticket))
	mux.Handle("GET /v1/tickets", s.endpoint(RouteTicketLookup, s.ticketLookup))
	mux.Handle("GET /v1/accounts/{account_id}", s.endpoint(RouteAccount, s.account))
	mux.Handle("PUT /v1/crm/records/{record_id}", s.endpoint(RouteCRM, s.crmPut))
	mux.Handle("GET /v1/crm/records/{record_id}", s.endpoint(RouteCRMGet, s.crmGet))
	mux.Handle("POST /v1/accounts/{account_id}/credits", s.endpoint(RouteCredit, s.credit))
	mux.Handle("GET /v1/credits", s.endpoint(RouteCreditLookup, s.creditLookup))

	mux.HandleFunc("GET /_admin/stats", func(w http.ResponseWriter, _ *http.Request) {
		writeResult(w, jsonResult(http.StatusOK, s.Stats()))
	})
	mux.HandleFunc("GET /_admin/effects", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Has("by") {
			writeResult(w, jsonResult(http.StatusOK, s.EffectsBy(q.Get("kind"), q.Get("by"))))
			return
		}
		writeResult(w, jsonResult(http.StatusOK, s.EffectsByKey(q.Get("kind"))))
	})
	mux.HandleFunc("GET /_admin/crm/{record_id}", func(w http.ResponseWriter, r *http.Request) {
		rec, ok := s.CRMRecord(r.PathValue("record_id"))
		if !ok {
			writeResult(w, notFound)
			return
		}
		writeResult(w, jsonResult(http.StatusOK, rec))
	})
	mux.HandleFunc("GET /_admin/activity", func(w http.ResponseWriter, r *http.Request) {
		writeResult(w, jsonResult(http.StatusOK, s.Activities(r.URL.Query().Get("customer"))))
	})
	mux.HandleFunc("POST /_admin/faults", s.adminFault)
	mux.HandleFunc("DELETE /_admin/faults", func(w http.ResponseWriter, _ *http.Request) {
		s.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /_admin/reset", func(w http.ResponseWriter, _ *http.Request) {
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	})
	return adminFromLoopback(mux)
}

// adminFromLoopback answers /_admin/ only to requests from a loopback
// address: the stand-ins are for development, and their admin routes
// (faults, reset, counts) would let anyone who reaches a shared stand-in
// steer what the ledger sees. Whatever address the server listens on (the
// compose service listens on every interface for the other containers),
// /_admin/ stays this host's. The vendor routes are not affected.
func adminFromLoopback(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/_admin/") {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
				writeResult(w, jsonResult(http.StatusForbidden, map[string]string{"error": "admin_loopback_only"}))
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// maxBody bounds request bodies; larger ones get 413 and no effect.
const maxBody = 1 << 20

// result is a response a handler decided on, written after faults had their say.
type result struct {
	status   int
	body     []byte
	replayed bool
}

// call is a vendor request as a handler sees it.
type call struct {
	*http.Request
	body []byte // the whole request body
	// visibleAt is when what the call commits becomes visible to lookups;
	// the zero time means at once (see FaultDelayedVisibility).
	visibleAt time.Time
	// webhooks collects the webhooks the call's effect sends (emit).
	webhooks *[]outgoing
}

// visible reports whether something committed to become visible at is
// visible now.
func visible(at time.Time) bool { return at.IsZero() || !time.Now().Before(at) }

// endpoint wraps a vendor handler with auth, counting, latency and faults.
// The handler runs under no lock; it takes s.mu itself for its effect.
func (s *Server) endpoint(route string, h func(r call) result) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.busy.begin()
		defer s.busy.end()
		w.Header().Set("Request-Id", op.NewID("req"))
		if !s.authorized(r) {
			writeResult(w, errorResult(http.StatusUnauthorized, "unauthorized"))
			return
		}
		f := s.begin(route)
		if f.Kind != "" {
			s.opts.Logger.Info().Str("route", route).Str("fault", string(f.Kind)).Msg("vendor fault injected")
		}
		// Read the whole body first: the client has then finished writing, so
		// "before commit" faults look to it exactly like "after commit" ones.
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeResult(w, errorResult(http.StatusRequestEntityTooLarge, "body_too_large"))
				return
			}
			resetConn(w) // the client went away mid-body: nothing to answer
			return
		}
		if customer := customerOf(route, r, body); customer != "" {
			// From here until the answer is written (or the connection
			// dropped), the vendor is busy with this customer.
			a := Activity{Route: route, Customer: customer, IdempotencyKey: r.Header.Get("Idempotency-Key"), Start: time.Now()}
			defer func() {
				a.End = time.Now()
				s.mu.Lock()
				s.st.addActivity(a)
				s.mu.Unlock()
			}()
		}
		delay := s.opts.Latency
		if f.Kind == FaultLatency {
			delay += f.Delay
		}
		// A slow vendor still commits after the delay, even if the client gave up.
		if !s.sleep(nil, delay) {
			resetConn(w) // closing down: never let an unanswered request look like a 200
			return
		}
		switch f.Kind {
		case FaultTimeoutBeforeCommit:
			s.stall(w, r, f.Delay)
			return
		case FaultError500BeforeCommit:
			writeResult(w, errorResult(http.StatusInternalServerError, "internal_error"))
			return
		case FaultRateLimit:
			w.Header().Set("Retry-After", "1")
			writeResult(w, errorResult(http.StatusTooManyRequests, "rate_limited"))
			return
		case FaultClientError:
			writeResult(w, errorResult(http.StatusBadRequest, "invalid_request"))
			return
		case FaultEndless:
			s.hold(r)
			resetConn(w)
			return
		}

		var hooks []outgoing
		c := call{Request: r, body: body, webhooks: &hooks}
		if f.Kind == FaultDelayedVisibility {
			c.visibleAt = time.Now().Add(f.Delay)
		}
		res := h(c)
		s.sendWebhooks(route, hooks)

		switch f.Kind {
		case FaultTimeoutAfterCommit:
			s.stall(w, r, f.Delay)
		case FaultError500AfterCommit, FaultDelayedVisibility:
			writeResult(w, errorResult(http.StatusInternalServerError, "internal_error"))
		case FaultResetAfterCommit:
			resetConn(w)
		case FaultMalformedAfterCommit:
			writeResult(w, result{status: http.StatusOK, body: []byte(`{"id":"ch_`)})
		case FaultNULIDAfterCommit:
			writeResult(w, withNULID(res))
		case FaultHugeHeaderAfterCommit:
			w.Header().Set("Request-Id", hugeRequestID())
			writeResult(w, res)
		case FaultTruncatedBodyAfterCommit:
			writeTruncated(w, res)
		default:
			writeResult(w, res)
		}
	})
}

func (s *Server) authorized(r *http.Request) bool {
	if s.opts.APIKey == "" {
		return true
	}
	got := r.Header.Get("Authorization")
	return subtle.ConstantTimeCompare([]byte(got), []byte("Bearer "+s.opts.APIKey)) == 1
}

// sleep waits d, or until ctx ends (when ctx is not nil) or the server
// closes. It reports whether the full delay elapsed.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	var ctxDone <-chan struct{}
	if ctx != nil {
		ctxDone = ctx.Done()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctxDone:
	case <-s.done:
	}
	return false
}

// stall holds the connection without answering until the client gives up,
// the server closes, or d (default Options.Stall) passes; then it closes the
// connection with no response.
func (s *Server) stall(w http.ResponseWriter, r *http.Request, d time.Duration) {
	if d <= 0 {
		d = s.opts.Stall
	}
	s.sleep(r.Context(), d)
	resetConn(w)
}

// hold keeps the request unanswered until the client gives up or the server
// closes.
func (s *Server) hold(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.done:
	}
}

// resetConn closes the client connection without a response, with an RST
// where possible so the client sees "connection reset by peer".
func resetConn(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // HTTP/2: abort the stream
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

func writeResult(w http.ResponseWriter, res result) {
	setHeaders(w, res)
	w.WriteHeader(res.status)
	_, _ = w.Write(res.body) // the client may be gone; nothing to do about it
}

func setHeaders(w http.ResponseWriter, res result) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if res.replayed {
		h.Set("Idempotent-Replayed", "true")
	}
}

// writeTruncated declares res's full length but writes only the first half
// of its body. The server then closes the connection, as it does whenever a
// handler writes less than its Content-Length.
func writeTruncated(w http.ResponseWriter, res result) {
	sent := res.body[:len(res.body)/2]
	declared := len(res.body)
	if declared == len(sent) { // an empty body: still declare more than is sent
		declared++
	}
	setHeaders(w, res)
	w.Header().Set("Content-Length", strconv.Itoa(declared))
	w.WriteHeader(res.status)
	_, _ = w.Write(sent)
}

// withNULID returns res with a U+0000 inserted after the prefix of its
// "id" ("ch_abc" becomes "ch_\u0000abc"); res unchanged if its body is not
// a JSON object with a non-empty string id.
func withNULID(res result) result {
	var obj map[string]json.RawMessage
	var id string
	if json.Unmarshal(res.body, &obj) != nil || json.Unmarshal(obj["id"], &id) != nil || id == "" {
		return res
	}
	i := strings.IndexByte(id, '_') + 1
	obj["id"], _ = json.Marshal(id[:i] + "\x00" + id[i:]) // a string always marshals
	out := jsonResult(res.status, obj)
	out.replayed = res.replayed
	return out
}

// hugeRequestID is a valid header value of exactly HugeHeaderBytes.
func hugeRequestID() string {
	const prefix = "req_"
	fill := strings.Repeat("0123456789abcdef", HugeHeaderBytes/16+1)
	return prefix + fill[:HugeHeaderBytes-len(prefix)]
}
