package vendors

import (
	"net/http"
	"net/mail"
	"slices"
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
	visibleAt       time.Time
}

// email is POST /v1/messages {"to","template","subject","body"}.
func (s *Server) email(r call) result {
	var in struct {
		To       string `json:"to"`
		Template string `json:"template"`
		Subject  string `json:"subject"`
		Body     string `json:"body"`
	}
	if !decodeJSON(r.body, &in) {
		return errorResult(http.StatusBadRequest, "invalid_json")
	}
	if !strings.Contains(in.To, "@") {
		return errorResult(http.StatusBadRequest, "invalid_recipient")
	}
	ref := r.Header.Get("X-Client-Reference")
	now := time.Now()
	m := &message{
		ID: op.NewID("msg"), Status: "queued", To: in.To, Template: in.Template,
		ClientReference: ref, Created: now.Unix(), created: now, visibleAt: r.visibleAt,
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.messages[m.ID] = m
	effectKey := ref
	if ref == "" {
		effectKey = in.To + "|" + in.Template
	} else {
		st.messageByRef[ref] = append(st.messageByRef[ref], m)
	}
	st.stats.Emails++
	st.effect(KindEmail, effectKey)
	st.countBy(KindEmail, AttrTo, in.To)
	st.countBy(KindEmail, AttrMailbox, mailbox(in.To))
	delivered := *m
	delivered.Status = "delivered"
	r.emit(ProviderEmail, "message.delivered", delivered, ref)
	return jsonResult(http.StatusAccepted, m)
}

// mailbox is the mailbox a recipient reaches: see AttrMailbox.
func mailbox(to string) string {
	if a, err := mail.ParseAddress(to); err == nil {
		return strings.ToLower(a.Address)
	}
	return strings.ToLower(strings.TrimSpace(to))
}

// emailLookup is GET /v1/messages?client_reference=R: the first visible
// message sent with R, "queued" for Options.EmailQueueDelay and "delivered" after.
func (s *Server) emailLookup(r call) result {
	ref := r.URL.Query().Get("client_reference")
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.st.messageByRef[ref], func(m *message) bool { return visible(m.visibleAt) })
	if i < 0 || ref == "" {
		return notFound
	}
	out := *s.st.messageByRef[ref][i]
	out.Status = "delivered"
	if time.Since(out.created) < s.opts.EmailQueueDelay {
		out.Status = "queued"
	}
	return jsonResult(http.StatusOK, out)
}
