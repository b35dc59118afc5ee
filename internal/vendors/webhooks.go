package vendors

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/pkg/op"
)

// The stand-ins send signed webhooks after their effects, once told where
// (SetWebhooks), as the vendors they imitate do:
//
//	provider         scheme              event                      after
//	payments         Standard Webhooks   payment.succeeded          a capture   (data: the charge, with idempotency_key)
//	payments         Standard Webhooks   charge.refunded            a refund    (data: the refund, with idempotency_key)
//	email            Standard Webhooks   message.delivered          a message   (data: the message, with client_reference)
//	payment_intents  Stripe-Signature    payment_intent.succeeded   an intent   (data.object: the intent; request.idempotency_key)
//
// A delivery that gets no 2xx is sent again (same id, same body, a new
// timestamp and signature) up to WebhookTries times; a 4xx stops it. The
// webhook faults (FaultWebhook*) drop, duplicate, delay or send before the
// API answer the next webhooks of a route.

// Webhook providers, as the example registry names them.
const (
	ProviderPayments       = "payments"
	ProviderEmail          = "email"
	ProviderPaymentIntents = "payment_intents"
)

// WebhookTries bounds the sends of one delivery.
const WebhookTries = 5

// WebhookTarget says where the stand-ins send their webhooks.
type WebhookTarget struct {
	// URL is the intake's base: a provider's deliveries go to URL + provider,
	// e.g. http://127.0.0.1:8480/webhooks/ + payments.
	URL string
	// Secrets are the signing secrets by provider: "whsec_<base64>" for the
	// Standard Webhooks providers, the Stripe secret for payment_intents. A
	// provider without one sends nothing.
	Secrets map[string]string
	// Client sends the deliveries (default a client with a 5s timeout).
	Client *http.Client
}

// SetWebhooks tells the stand-ins to send webhooks to t (a zero t stops them).
func (s *Server) SetWebhooks(t WebhookTarget) {
	if t.Client == nil {
		t.Client = &http.Client{Timeout: 5 * time.Second}
	}
	s.mu.Lock()
	s.webhooks = t
	s.mu.Unlock()
}

// outgoing is a webhook a handler produced with its effect.
type outgoing struct {
	provider, eventType string
	data                json.RawMessage
	// idempotencyKey is Stripe's request.idempotency_key.
	idempotencyKey string
}

// emit queues a webhook for the effect the handler just performed; the
// caller holds s.mu, so data is marshalled as it is now.
func (c call) emit(provider, eventType string, data any, idempotencyKey string) {
	if c.webhooks == nil {
		return
	}
	raw, _ := json.Marshal(data) // the vendors' own structs: cannot fail
	*c.webhooks = append(*c.webhooks, outgoing{provider: provider, eventType: eventType, data: raw, idempotencyKey: idempotencyKey})
}

// webhookFault takes one use of the first webhook fault for route.
func (s *Server) webhookFault(route string) Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, pf := range s.st.webhookFaults {
		if pf.Route != route && pf.Route != RouteAny {
			continue
		}
		pf.left--
		if pf.left == 0 {
			s.st.webhookFaults = slices.Delete(s.st.webhookFaults, i, i+1)
		}
		s.st.stats.FaultsFired++
		return pf.Fault
	}
	return Fault{}
}

// sendWebhooks sends what a request's handler produced: in the
// background, or before the answer is written under
// FaultWebhookBeforeAnswer.
func (s *Server) sendWebhooks(route string, out []outgoing) {
	if len(out) == 0 {
		return
	}
	s.mu.Lock()
	target := s.webhooks
	s.mu.Unlock()
	for _, o := range out {
		// A webhook fault is used by the route's next effect, whether or not
		// anyone listens for its webhook.
		f := s.webhookFault(route)
		if f.Kind != "" {
			s.opts.Logger.Info().Str("route", route).Str("fault", string(f.Kind)).Msg("vendor webhook fault injected")
		}
		secret := target.Secrets[o.provider]
		if target.URL == "" || secret == "" {
			continue
		}
		d := delivery{target: target, secret: secret, o: o, id: op.NewID("msg")}
		if o.provider == ProviderPaymentIntents {
			d.id = op.NewID("evt")
		}
		d.body = d.payload()
		copies := 1
		switch f.Kind {
		case FaultWebhookDrop:
			continue
		case FaultWebhookDuplicate:
			copies = 2
		case FaultWebhookBeforeAnswer:
			s.deliver(d)
			continue
		}
		go func() {
			if f.Kind == FaultWebhookDelay && !s.sleep(nil, f.Delay) {
				return
			}
			for range copies {
				s.deliver(d)
			}
		}()
	}
}

// delivery is one webhook, sent (and sent again) with the same id and body.
type delivery struct {
	target WebhookTarget
	secret string
	o      outgoing
	id     string
	body   []byte
}

func (d delivery) payload() []byte {
	now := time.Now().UTC()
	var v any
	if d.o.provider == ProviderPaymentIntents {
		// Stripe's event envelope.
		v = map[string]any{"id": d.id, "object": "event", "type": d.o.eventType, "created": now.Unix(), "api_version": "2024-06-20",
			"data":    map[string]any{"object": d.o.data},
			"request": map[string]any{"id": op.NewID("req"), "idempotency_key": d.o.idempotencyKey}}
	} else {
		v = map[string]any{"type": d.o.eventType, "timestamp": now.Format(time.RFC3339Nano), "data": d.o.data}
	}
	b, _ := json.Marshal(v) // maps of strings and raw JSON: cannot fail
	return b
}

// sign returns the signature headers for one send at ts, per the
// provider's scheme.
func (d delivery) sign(ts int64) map[string]string {
	t := strconv.FormatInt(ts, 10)
	if d.o.provider == ProviderPaymentIntents {
		mac := hmac.New(sha256.New, []byte(d.secret))
		mac.Write([]byte(t + "."))
		mac.Write(d.body)
		return map[string]string{"Stripe-Signature": "t=" + t + ",v1=" + hex.EncodeToString(mac.Sum(nil))}
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(d.secret, "whsec_"))
	if err != nil {
		key = []byte(d.secret)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(d.id + "." + t + "."))
	mac.Write(d.body)
	return map[string]string{"webhook-id": d.id, "webhook-timestamp": t,
		"webhook-signature": "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))}
}

// deliver sends d until it gets a 2xx or a 4xx, at most WebhookTries times.
func (s *Server) deliver(d delivery) {
	wait := 100 * time.Millisecond
	for try := 1; ; try++ {
		status := s.send(d)
		switch {
		case status >= 200 && status < 300:
			s.count(func(st *Stats) { st.WebhooksDelivered++ })
			return
		case status >= 400 && status < 500:
			s.count(func(st *Stats) { st.WebhooksRefused++ })
			s.opts.Logger.Warn().Str("provider", d.o.provider).Int("status", status).Msg("vendor webhook refused")
			return
		case try >= WebhookTries:
			s.count(func(st *Stats) { st.WebhooksFailed++ })
			s.opts.Logger.Warn().Str("provider", d.o.provider).Int("status", status).Msg("vendor webhook given up")
			return
		}
		if !s.sleep(nil, wait) {
			return
		}
		wait *= 2
	}
}

// send makes one attempt; 0 is a transport failure.
func (s *Server) send(d delivery) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.target.URL+d.o.provider, bytes.NewReader(d.body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range d.sign(time.Now().Unix()) {
		req.Header.Set(k, v)
	}
	s.count(func(st *Stats) { st.WebhooksSent++ })
	resp, err := d.target.Client.Do(req)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func (s *Server) count(f func(*Stats)) {
	s.mu.Lock()
	f(&s.st.stats)
	s.mu.Unlock()
}
