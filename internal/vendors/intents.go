package vendors

import (
	"fmt"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/pkg/op"
)

// Payment intents imitate a processor whose API takes form-encoded bodies,
// not JSON, and answers errors as {"error":{"type","code","message","param"}}
// (Stripe's shape). Idempotency-Key works as for captures, except that a key
// reused with other parameters is refused with 400 and type
// "idempotency_error". An intent succeeds at once: there is no separate
// confirm step.
//
// Parameters (strict: an unknown or repeated parameter is a 400):
//
//	amount              required, positive integer in the currency's minor unit
//	currency            required, three lowercase letters
//	customer            optional
//	metadata[order_id]  required, non-empty
//	metadata[K]         optional, any other key, within Stripe's limits
//
// Faults still answer with the plain {"error":"…"} bodies of the other routes.

// Metadata limits, Stripe's.
const (
	maxMetadataKeys     = 50
	maxMetadataKeyLen   = 40
	maxMetadataValueLen = 500
)

type paymentIntent struct {
	ID       string            `json:"id"`
	Object   string            `json:"object"`
	Status   string            `json:"status"`
	Amount   int64             `json:"amount"`
	Currency string            `json:"currency"`
	Customer *string           `json:"customer"` // null when absent, as Stripe sends it
	Metadata map[string]string `json:"metadata"`
	Created  int64             `json:"created"`

	visibleAt time.Time
}

// stripeError is the error body of the payment intent routes.
type stripeError struct {
	Error stripeErrorBody `json:"error"`
}

type stripeErrorBody struct {
	Type    string `json:"type"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	Param   string `json:"param,omitempty"`
}

func invalidRequest(param, format string, args ...any) result {
	return jsonResult(http.StatusBadRequest, stripeError{stripeErrorBody{
		Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, args...),
	}})
}

var (
	intentMissing = jsonResult(http.StatusNotFound, stripeError{stripeErrorBody{
		Type: "invalid_request_error", Code: "resource_missing", Message: "No such payment_intent",
	}})
	intentKeyReused = jsonResult(http.StatusBadRequest, stripeError{stripeErrorBody{
		Type:    "idempotency_error",
		Message: "Keys for idempotent requests can only be used with the same parameters they were first used with",
	}})
)

// intentParams is a validated payment intent request.
type intentParams struct {
	amount   int64
	currency string
	customer *string
	metadata map[string]string
}

// paymentIntent is POST /v1/payment_intents.
func (s *Server) paymentIntent(r call) result {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/x-www-form-urlencoded" {
		return invalidRequest("", "Content-Type must be application/x-www-form-urlencoded")
	}
	form, err := url.ParseQuery(string(r.body))
	if err != nil {
		return invalidRequest("", "Invalid form-encoded body")
	}
	key := r.Header.Get("Idempotency-Key")
	// Encode sorts by name: parameter order does not make another request.
	hash := hashRequest(r.URL.Path, []byte(form.Encode()))

	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	if res, ok := st.replay(RoutePaymentIntent, key, hash, intentKeyReused); ok {
		return res
	}
	in, bad := parseIntent(form)
	if bad != nil {
		return *bad
	}
	orderID := in.metadata["order_id"]
	pi := &paymentIntent{
		ID: op.NewID("pi"), Object: "payment_intent", Status: "succeeded",
		Amount: in.amount, Currency: in.currency, Customer: in.customer,
		Metadata: in.metadata, Created: time.Now().Unix(), visibleAt: r.visibleAt,
	}
	st.intents[pi.ID] = pi
	st.stats.PaymentIntents++
	st.keyedEffect(KindPaymentIntent, key, orderID)
	st.countBy(KindPaymentIntent, AttrOrderID, orderID)
	res := jsonResult(http.StatusOK, pi)
	st.remember(RoutePaymentIntent, key, hash, res, pi.ID)
	r.emit(ProviderPaymentIntents, "payment_intent.succeeded", pi, key)
	return res
}

// parseIntent validates the form; a non-nil result is the 400 to answer.
func parseIntent(form url.Values) (intentParams, *result) {
	fail := func(param, format string, args ...any) (intentParams, *result) {
		res := invalidRequest(param, format, args...)
		return intentParams{}, &res
	}
	in := intentParams{metadata: map[string]string{}}
	for _, name := range slices.Sorted(maps.Keys(form)) { // sorted: the same request gets the same error
		vals := form[name]
		if len(vals) != 1 {
			return fail(clip(name), "Received duplicate parameter: %s", clip(name))
		}
		v := vals[0]
		switch {
		case name == "amount":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 || v[0] == '+' {
				return fail(name, "Invalid amount: must be a positive integer")
			}
			in.amount = n
		case name == "currency":
			if !isLowerCurrency(v) {
				return fail(name, "Invalid currency: must be three lowercase letters")
			}
			in.currency = v
		case name == "customer":
			in.customer = &v
		case strings.HasPrefix(name, "metadata[") && strings.HasSuffix(name, "]"):
			k := name[len("metadata[") : len(name)-1]
			if k == "" || len(k) > maxMetadataKeyLen || len(v) > maxMetadataValueLen {
				return fail(clip(name), "Invalid metadata: keys up to %d and values up to %d characters",
					maxMetadataKeyLen, maxMetadataValueLen)
			}
			in.metadata[k] = v
		default:
			return fail(clip(name), "Received unknown parameter: %s", clip(name))
		}
	}
	switch {
	case in.amount == 0:
		return fail("amount", "Missing required param: amount")
	case in.currency == "":
		return fail("currency", "Missing required param: currency")
	case in.metadata["order_id"] == "":
		return fail("metadata[order_id]", "Missing required param: metadata[order_id]")
	case len(in.metadata) > maxMetadataKeys:
		return fail("metadata", "Invalid metadata: at most %d keys", maxMetadataKeys)
	}
	return in, nil
}

func isLowerCurrency(v string) bool {
	if len(v) != 3 {
		return false
	}
	for i := range len(v) {
		if v[i] < 'a' || v[i] > 'z' {
			return false
		}
	}
	return true
}

// clip bounds a client-chosen parameter name echoed in an error.
func clip(s string) string {
	const maxEcho = 64
	if len(s) > maxEcho {
		return s[:maxEcho] + "…"
	}
	return s
}

// paymentIntentLookup is GET /v1/payment_intents?idempotency_key=K.
func (s *Server) paymentIntentLookup(r call) result {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, ok := s.st.intents[s.st.lookupKey(RoutePaymentIntent, r.URL.Query().Get("idempotency_key"))]
	if !ok || !visible(pi.visibleAt) {
		return intentMissing
	}
	return jsonResult(http.StatusOK, pi)
}
