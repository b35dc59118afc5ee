package vendors

import (
	"net/http"
	"time"

	"github.com/opledger/opledger/pkg/op"
)

// Payments imitates a card processor that honours Idempotency-Key: a new key
// performs the effect and stores the response, the same key with the same
// request replays it (Idempotent-Replayed: true), the same key with another
// request is refused with 422. A request without a key still performs the
// effect — a vendor cannot refuse — and is counted in Stats.Unkeyed.

type charge struct {
	ID                  string `json:"id"`
	Object              string `json:"object"`
	Status              string `json:"status"`
	OrderID             string `json:"order_id"`
	AmountCents         int64  `json:"amount_cents"`
	AmountRefundedCents int64  `json:"amount_refunded_cents"`
	Currency            string `json:"currency"`
	CustomerID          string `json:"customer_id,omitempty"`
	IdempotencyKey      string `json:"idempotency_key,omitempty"`
	Created             int64  `json:"created"`
	visibleAt           time.Time
}

type refund struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	Status         string `json:"status"`
	ChargeID       string `json:"charge_id"`
	CustomerID     string `json:"customer_id,omitempty"`
	AmountCents    int64  `json:"amount_cents"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Created        int64  `json:"created"`
	visibleAt      time.Time
}

// capture is POST /v1/payments/capture {"order_id","amount_cents","currency","customer_id"}.
func (s *Server) capture(r call) result {
	var in struct {
		OrderID     string `json:"order_id"`
		AmountCents int64  `json:"amount_cents"`
		Currency    string `json:"currency"`
		CustomerID  string `json:"customer_id"`
	}
	if !decodeJSON(r.body, &in) {
		return errorResult(http.StatusBadRequest, "invalid_json")
	}
	key := r.Header.Get("Idempotency-Key")
	hash := requestHash(r.URL.Path, r.body)

	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	if res, ok := st.replay(RouteCapture, key, hash, keyReused); ok {
		return res
	}
	if in.OrderID == "" || in.AmountCents <= 0 || len(in.Currency) != 3 {
		return errorResult(http.StatusBadRequest, "invalid_request")
	}
	ch := &charge{
		ID: op.NewID("ch"), Object: "charge", Status: "succeeded",
		OrderID: in.OrderID, AmountCents: in.AmountCents, Currency: in.Currency,
		CustomerID: in.CustomerID, IdempotencyKey: key, Created: time.Now().Unix(),
		visibleAt: r.visibleAt,
	}
	st.charges[ch.ID] = ch
	st.chargesByOrder[ch.OrderID] = append(st.chargesByOrder[ch.OrderID], ch)
	st.stats.Captures++
	st.keyedEffect(KindCapture, key, in.OrderID)
	st.countBy(KindCapture, AttrOrderID, in.OrderID)
	res := jsonResult(http.StatusOK, ch)
	st.remember(RouteCapture, key, hash, res, ch.ID)
	r.emit(ProviderPayments, "payment.succeeded", ch, key)
	return res
}

// captureLookup is GET /v1/payments?idempotency_key=K: the charge as it is now.
func (s *Server) captureLookup(r call) result {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.st.charges[s.st.lookupKey(RouteCapture, r.URL.Query().Get("idempotency_key"))]
	if !ok || !visible(ch.visibleAt) {
		return notFound
	}
	return jsonResult(http.StatusOK, ch)
}

// refund is POST /v1/refunds {"charge_id" or "order_id", "amount_cents",
// "customer_id"}. amount_cents 0 or absent refunds what is left of the
// charge. customer_id is optional; when given it must be the charge's
// customer (400 customer_mismatch), as a processor checks the account a
// refund is booked to. Other fields are ignored.
func (s *Server) refund(r call) result {
	var in struct {
		ChargeID    string `json:"charge_id"`
		OrderID     string `json:"order_id"`
		AmountCents int64  `json:"amount_cents"`
		CustomerID  string `json:"customer_id"`
	}
	if !decodeJSON(r.body, &in) {
		return errorResult(http.StatusBadRequest, "invalid_json")
	}
	key := r.Header.Get("Idempotency-Key")
	hash := requestHash(r.URL.Path, r.body)

	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	if res, ok := st.replay(RouteRefund, key, hash, keyReused); ok {
		return res
	}
	if in.AmountCents < 0 || (in.ChargeID == "") == (in.OrderID == "") {
		return errorResult(http.StatusBadRequest, "invalid_request")
	}
	ch := st.charges[in.ChargeID]
	if in.OrderID != "" && len(st.chargesByOrder[in.OrderID]) > 0 {
		ch = st.chargesByOrder[in.OrderID][0]
	}
	if ch == nil {
		return errorResult(http.StatusNotFound, "charge_not_found")
	}
	if in.CustomerID != "" && ch.CustomerID != "" && in.CustomerID != ch.CustomerID {
		return errorResult(http.StatusBadRequest, "customer_mismatch")
	}
	left := ch.AmountCents - ch.AmountRefundedCents
	amount := in.AmountCents
	if amount == 0 {
		amount = left
	}
	if amount == 0 || amount > left {
		return errorResult(http.StatusBadRequest, "amount_exceeds_remaining")
	}
	ch.AmountRefundedCents += amount
	re := &refund{
		ID: op.NewID("re"), Object: "refund", Status: "succeeded", ChargeID: ch.ID, CustomerID: ch.CustomerID,
		AmountCents: amount, IdempotencyKey: key, Created: time.Now().Unix(),
		visibleAt: r.visibleAt,
	}
	st.refunds[re.ID] = re
	st.stats.Refunds++
	st.keyedEffect(KindRefund, key, ch.ID)
	res := jsonResult(http.StatusOK, re)
	st.remember(RouteRefund, key, hash, res, re.ID)
	r.emit(ProviderPayments, "charge.refunded", re, key)
	return res
}

// refundLookup is GET /v1/refunds?idempotency_key=K.
func (s *Server) refundLookup(r call) result {
	s.mu.Lock()
	defer s.mu.Unlock()
	re, ok := s.st.refunds[s.st.lookupKey(RouteRefund, r.URL.Query().Get("idempotency_key"))]
	if !ok || !visible(re.visibleAt) {
		return notFound
	}
	return jsonResult(http.StatusOK, re)
}
