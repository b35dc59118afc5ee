package vendors

import (
	"net/http"
	"time"

	"github.com/opledger/opledger/pkg/op"
)

// Tickets imitates a help desk that takes a client token (Idempotency-Key):
// create or replay, like payments.

type ticket struct {
	ID             string `json:"id"`
	Status         string `json:"status"`
	ConversationID string `json:"conversation_id"`
	Queue          string `json:"queue,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Created        int64  `json:"created"`
	visibleAt      time.Time
}

// ticket is POST /v1/tickets {"conversation_id","queue","summary"}; 201 on create.
func (s *Server) ticket(r call) result {
	var in struct {
		ConversationID string `json:"conversation_id"`
		Queue          string `json:"queue"`
		Summary        string `json:"summary"`
	}
	if !decodeJSON(r.body, &in) {
		return errorResult(http.StatusBadRequest, "invalid_json")
	}
	key := r.Header.Get("Idempotency-Key")
	hash := requestHash(r.URL.Path, r.body)

	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	if res, ok := st.replay(RouteTicket, key, hash, keyReused); ok {
		return res
	}
	if in.ConversationID == "" {
		return errorResult(http.StatusBadRequest, "invalid_request")
	}
	tk := &ticket{
		ID: op.NewID("tk"), Status: "open", ConversationID: in.ConversationID,
		Queue: in.Queue, IdempotencyKey: key, Created: time.Now().Unix(),
		visibleAt: r.visibleAt,
	}
	st.tickets[tk.ID] = tk
	st.stats.Tickets++
	st.keyedEffect(KindTicket, key, in.ConversationID)
	res := jsonResult(http.StatusCreated, tk)
	st.remember(RouteTicket, key, hash, res, tk.ID)
	return res
}

// ticketLookup is GET /v1/tickets?idempotency_key=K.
func (s *Server) ticketLookup(r call) result {
	s.mu.Lock()
	defer s.mu.Unlock()
	tk, ok := s.st.tickets[s.st.lookupKey(RouteTicket, r.URL.Query().Get("idempotency_key"))]
	if !ok || !visible(tk.visibleAt) {
		return notFound
	}
	return jsonResult(http.StatusOK, tk)
}
