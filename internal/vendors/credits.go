package vendors

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/opledger/opledger/pkg/op"
)

// Credits imitate a billing system's account credits (a retention offer):
// keyed by Idempotency-Key like payments, the body read strictly.

type credit struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	Status         string `json:"status"`
	AccountID      string `json:"account_id"`
	AmountCents    int64  `json:"amount_cents"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Created        int64  `json:"created"`
	visibleAt      time.Time
}

// credit is POST /v1/accounts/{account_id}/credits {"amount_cents","reason"};
// 201 {"id":"cr_…","status":"applied",…}. Accounts named "missing_…" do
// not exist (404), "closed_…" take no credit (400).
func (s *Server) credit(r call) result {
	var in struct {
		AmountCents int64  `json:"amount_cents"`
		Reason      string `json:"reason"`
	}
	if !decodeStrict(r.body, &in) {
		return errorResult(http.StatusBadRequest, "invalid_json")
	}
	account := r.PathValue("account_id")
	key := r.Header.Get("Idempotency-Key")
	hash := requestHash(r.URL.Path, r.body)

	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	if res, ok := st.replay(RouteCredit, key, hash, keyReused); ok {
		return res
	}
	switch {
	case strings.HasPrefix(account, "missing_"):
		return errorResult(http.StatusNotFound, "account_not_found")
	case strings.HasPrefix(account, "closed_"):
		return errorResult(http.StatusBadRequest, "account_closed")
	case in.AmountCents <= 0:
		return errorResult(http.StatusBadRequest, "invalid_request")
	}
	cr := &credit{
		ID: op.NewID("cr"), Object: "credit", Status: "applied", AccountID: account,
		AmountCents: in.AmountCents, IdempotencyKey: key, Created: time.Now().Unix(),
		visibleAt: r.visibleAt,
	}
	st.credits[cr.ID] = cr
	st.stats.Credits++
	st.keyedEffect(KindCredit, key, account)
	res := jsonResult(http.StatusCreated, cr)
	st.remember(RouteCredit, key, hash, res, cr.ID)
	return res
}

// creditLookup is GET /v1/credits?idempotency_key=K.
func (s *Server) creditLookup(r call) result {
	s.mu.Lock()
	defer s.mu.Unlock()
	cr, ok := s.st.credits[s.st.lookupKey(RouteCredit, r.URL.Query().Get("idempotency_key"))]
	if !ok || !visible(cr.visibleAt) {
		return notFound
	}
	return jsonResult(http.StatusOK, cr)
}

// decodeStrict decodes exactly one JSON object into v with no field v does
// not have; false means 400.
func decodeStrict(body []byte, v any) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if dec.Decode(v) != nil {
		return false
	}
	_, err := dec.Token()
	return errors.Is(err, io.EOF) // nothing but white space after the object
}
