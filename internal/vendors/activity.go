package vendors

import (
	"encoding/json"
	"net/http"
	"slices"
	"time"
)

// Activity is the time the vendor spent on one request about a customer's
// money: a refund or an account credit, from the moment it had read the
// request (before any latency fault) to the moment it answered it, or
// dropped or stalled the connection and let go. Two activities of one
// customer that overlap were processed at the same time.
type Activity struct {
	// Route is RouteRefund or RouteCredit.
	Route string `json:"route"`
	// Customer is the refund's customer_id, or the credited account id.
	Customer string `json:"customer"`
	// IdempotencyKey is the request's Idempotency-Key, if any.
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	Start          time.Time `json:"start"`
	End            time.Time `json:"end"`
}

// maxActivities bounds what the server remembers; the oldest go first.
const maxActivities = 10_000

// Activities returns the answered refund and credit requests about customer,
// in the order they arrived. Requests still being processed are not in it.
// The slice is a copy.
func (s *Server) Activities(customer string) []Activity {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Activity
	for _, a := range s.st.activities {
		if a.Customer == customer {
			out = append(out, a)
		}
	}
	slices.SortStableFunc(out, func(a, b Activity) int { return a.Start.Compare(b.Start) })
	return out
}

// addActivity remembers a. The caller holds s.mu.
func (st *state) addActivity(a Activity) {
	if len(st.activities) >= maxActivities {
		st.activities = slices.Delete(st.activities, 0, len(st.activities)-maxActivities+1)
	}
	st.activities = append(st.activities, a)
}

// customerOf names the customer a request is about, or "" for requests
// whose activity is not recorded: a refund's customer_id (a refund sent
// without one is not attributed), a credit's account id.
func customerOf(route string, r *http.Request, body []byte) string {
	switch route {
	case RouteRefund:
		var in struct {
			CustomerID string `json:"customer_id"`
		}
		if json.Unmarshal(body, &in) == nil {
			return in.CustomerID
		}
	case RouteCredit:
		return r.PathValue("account_id")
	}
	return ""
}
