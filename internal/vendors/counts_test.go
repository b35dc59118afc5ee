package vendors_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/vendors"
)

// TestEmailsByMailbox: addresses differing only in case are two recipients as
// received but one mailbox.
func TestEmailsByMailbox(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	for _, to := range []string{"Victim@Example.COM", "victim@example.com", "Victim <VICTIM@example.com>", "other@example.com"} {
		require.Equal(t, http.StatusAccepted, b.do("POST", "/v1/messages", `{"to":"`+to+`"}`).status, to)
	}
	require.Equal(t, http.StatusBadRequest, b.do("POST", "/v1/messages", `{"to":"victim"}`).status)

	require.Equal(t, map[string]int{
		"Victim@Example.COM": 1, "victim@example.com": 1, "Victim <VICTIM@example.com>": 1, "other@example.com": 1,
	}, b.srv.EffectsBy(vendors.KindEmail, vendors.AttrTo))
	byMailbox := map[string]int{"victim@example.com": 3, "other@example.com": 1}
	require.Equal(t, byMailbox, b.srv.EffectsBy(vendors.KindEmail, vendors.AttrMailbox))

	rep := b.do("GET", "/_admin/effects?kind=email&by=mailbox", "")
	require.Equal(t, http.StatusOK, rep.status)
	var got map[string]int
	require.NoError(t, json.Unmarshal([]byte(rep.raw), &got))
	require.Equal(t, byMailbox, got)
	require.Equal(t, "{}", b.do("GET", "/_admin/effects?kind=email&by=nope", "").raw)
	require.Empty(t, b.srv.EffectsBy(vendors.KindEmail, vendors.AttrOrderID))
}

func TestChargesByOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	capture := func(order, key string) {
		body := `{"order_id":"` + order + `","amount_cents":100,"currency":"USD"}`
		require.Equal(t, http.StatusOK, b.do("POST", "/v1/payments/capture", body, "Idempotency-Key", key).status)
	}
	capture("o1", "k1")
	capture("o1", "k2") // a second key for the same order: a second charge
	capture("o1", "k1") // a replay: no charge
	capture("o2", "k3")
	require.Equal(t, http.StatusOK, b.intent("amount=5&currency=usd&metadata%5Border_id%5D=o1", "Idempotency-Key", "p1").status)
	require.Equal(t, http.StatusOK, b.intent("amount=5&currency=usd&metadata%5Border_id%5D=o1", "Idempotency-Key", "p1").status)

	require.Equal(t, map[string]int{"o1": 2, "o2": 1}, b.srv.EffectsBy(vendors.KindCapture, vendors.AttrOrderID))
	require.Equal(t, map[string]int{"o1": 1}, b.srv.EffectsBy(vendors.KindPaymentIntent, vendors.AttrOrderID))
	require.Equal(t, `{"o1":2,"o2":1}`, b.do("GET", "/_admin/effects?kind=capture&by=order_id", "").raw)

	b.srv.Reset()
	require.Empty(t, b.srv.EffectsBy(vendors.KindCapture, vendors.AttrOrderID))
}

func TestCRMRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	_, ok := b.srv.CRMRecord("r1")
	require.False(t, ok)
	require.Equal(t, http.StatusNotFound, b.do("GET", "/_admin/crm/r1", "").status)

	require.Equal(t, http.StatusOK, b.do("PUT", "/v1/crm/records/r1", `{"field":"status","value":"won"}`).status)
	require.Equal(t, http.StatusOK, b.do("PUT", "/v1/crm/records/r1", `{"seats":12}`).status)
	rec, ok := b.srv.CRMRecord("r1")
	require.True(t, ok)
	require.Equal(t, vendors.CRMRecord{ID: "r1", Version: 2, Fields: map[string]json.RawMessage{
		"status": json.RawMessage(`"won"`), "seats": json.RawMessage(`12`),
	}}, rec)

	// The result is a copy.
	rec.Fields["status"][1] = 'X'
	rec.Fields["new"] = json.RawMessage(`1`)
	again, _ := b.srv.CRMRecord("r1")
	require.Equal(t, json.RawMessage(`"won"`), again.Fields["status"])
	require.NotContains(t, again.Fields, "new")

	admin := b.do("GET", "/_admin/crm/r1", "")
	require.Equal(t, http.StatusOK, admin.status)
	require.JSONEq(t, `{"id":"r1","version":2,"fields":{"status":"won","seats":12}}`, admin.raw)
	require.Zero(t, b.srv.Stats().Requests[vendors.RouteCRMGet], "admin reads are not vendor requests")

	// A write GET does not show yet is already the record's truth.
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCRM, Kind: vendors.FaultDelayedVisibility, Delay: time.Hour}))
	require.Equal(t, http.StatusInternalServerError, b.do("PUT", "/v1/crm/records/r1", `{"field":"status","value":"lost"}`).status)
	require.EqualValues(t, 2, b.do("GET", "/v1/crm/records/r1", "").body["version"])
	rec, _ = b.srv.CRMRecord("r1")
	require.Equal(t, 3, rec.Version)
	require.Equal(t, json.RawMessage(`"lost"`), rec.Fields["status"])
	require.EqualValues(t, 3, b.do("GET", "/_admin/crm/r1", "").body["version"])
}
