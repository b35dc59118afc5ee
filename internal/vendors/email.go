package vendors

import (
	"net/http"
	"strings"
	"time"

	"github.com/opledger/opledger/pkg/op"
)

// Email imitates a plain relay API with no idempotency: every accepted
// request sends a message. X-Client-Reference is only stored, so a caller can
// later ask whether a message with its reference went out.

type message struct {
	ID              string `json:"id"`
	Status          string `json:"status"`
	To              string `json:"to"`
	Template        string `json:"template,omitempty"`
	ClientReference string `json:"client_reference,omitempty"`
	Created         int64  `json:"created"`
	created         time.Time
}

// email is POST /v1/messages {"to","template","subject","body"}.
func (s *Server) email(r *http.Request, body []byte) result {
	var in struct {
		To       string `json:"to"`
		Template string `json:"template"`
		Subject  string `json:"subject"`
		Body     string `json:"body"`
	}
	if !decodeJSON(body, &in) {
		return errorResult(http.StatusBadRequest, "invalid_json")
	}
	if !strings.Contains(in.To, "@") {
		return errorResult(http.StatusBadRequest, "invalid_recipient")
	}
	ref := r.Header.Get("X-Client-Reference")
	now := time.Now()
	m := &message{
		ID: op.NewID("msg"), Status: "queued", To: in.To, Template: in.Template,
		ClientReference: ref, Created: now.Unix(), created: now,
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.messages[m.ID] = m
	effectKey := ref
	if ref == "" {
		effectKey = in.To + "|" + in.Template
	} else if _, seen := st.messageByRef[ref]; !seen {
		st.messageByRef[ref] = m
	}
	st.stats.Emails++
	st.effect(KindEmail, effectKey)
	return jsonResult(http.StatusAccepted, m)
}

// emailLookup is GET /v1/messages?client_reference=R: the first message sent
// with R, "queued" for Options.EmailQueueDelay and "delivered" after.
func (s *Server) emailLookup(r *http.Request, _ []byte) result {
	ref := r.URL.Query().Get("client_reference")
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.st.messageByRef[ref]
	if !ok || ref == "" {
		return notFound
	}
	out := *m
	out.Status = "delivered"
	if time.Since(m.created) < s.opts.EmailQueueDelay {
		out.Status = "queued"
	}
	return jsonResult(http.StatusOK, out)
}
