package api_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/api"
)

// Parked outbox rows (messages NATS refused until they were parked) are
// visible to operators and can be put back once the cause is fixed: any
// role lists them (without payloads), an operator requeues one with a
// reason, the relay publishes it, and every requeue, refused or not, is in
// the audit trail. The maintenance leader's opledger_outbox_parked gauge
// follows within a sweep pass, not a retention pass (a minute).
//
// Breaking it: parked rows visible only through a log line and a gauge (as
// they were), a requeue that needs no operator or leaves no audit row, or
// a gauge refreshed once a minute.
func TestParkedRowsListedAndRequeued(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db, err := pgx.Connect(b.ctx, b.d.Infra.DatabaseURL)
	require.NoError(t, err)
	defer db.Close(context.WithoutCancel(b.ctx))
	var id int64
	require.NoError(t, db.QueryRow(b.ctx, `INSERT INTO outbox (subject, msg_id, payload, publish_count, publish_failures, last_error, parked_at)
		VALUES ('opledger.results.wf_parked', 'msg_parked_1', '{"spec":"x"}', 5, 5, 'nats: maximum payload exceeded', now()) RETURNING id`).Scan(&id))
	gauge := func(want int) {
		t.Helper()
		require.Eventually(t, func() bool {
			req, _ := http.NewRequest(http.MethodGet, b.url+"/metrics", nil)
			req.Header.Set("Authorization", "Bearer "+b.tok["vera"])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return strings.Contains(string(body), "\nopledger_outbox_parked "+strconv.Itoa(want)+"\n")
		}, 10*time.Second, 50*time.Millisecond, "opledger_outbox_parked %d", want)
	}
	gauge(1)

	var list api.ParkedResponse
	b.must(t, http.StatusOK, &list, "vera", "GET", "/v1/outbox/parked", "", nil)
	require.Equal(t, int64(1), list.Total)
	require.Len(t, list.Parked, 1)
	p := list.Parked[0]
	require.Equal(t, id, p.ID)
	require.Equal(t, "opledger.results.wf_parked", p.Subject)
	require.Equal(t, 5, p.Failures)
	require.Equal(t, "nats: maximum payload exceeded", p.LastError)
	require.Equal(t, int64(len(`{"spec":"x"}`)), p.PayloadBytes)
	b.refused(t, http.StatusBadRequest, api.CodeInvalid, "vera", "GET", "/v1/outbox/parked?limit=0", "", nil)

	route, rid := "/v1/outbox/parked/{id}/requeue", strconv.FormatInt(id, 10)
	b.refused(t, http.StatusForbidden, api.CodeForbidden, "vera", "POST", route, rid, map[string]string{"reason": "raised max_payload"})
	b.refused(t, http.StatusBadRequest, api.CodeInvalid, "oscar", "POST", route, rid, map[string]string{"reason": " "})
	var rq api.RequeueResponse
	b.must(t, http.StatusOK, &rq, "oscar", "POST", route, rid, map[string]string{"reason": "raised max_payload"})
	require.Equal(t, "msg_parked_1", rq.Requeued.MsgID)
	require.Eventually(t, func() bool {
		var left bool
		return db.QueryRow(b.ctx, `SELECT EXISTS (SELECT 1 FROM outbox WHERE id = $1)`, id).Scan(&left) == nil && !left
	}, 10*time.Second, 20*time.Millisecond, "the relay published it (and deleted its row)")
	gauge(0)
	b.refused(t, http.StatusNotFound, api.CodeNotFound, "oscar", "POST", route, rid, map[string]string{"reason": "again"})
	b.must(t, http.StatusOK, &list, "vera", "GET", "/v1/outbox/parked", "", nil)
	require.Zero(t, list.Total)
	require.Empty(t, list.Parked)

	rows, err := db.Query(b.ctx, `SELECT actor, outcome, detail->>'outbox_id' FROM audit_log WHERE action = 'requeue' ORDER BY id`)
	require.NoError(t, err)
	var trail []string
	for rows.Next() {
		var actor, outcome, outboxID string
		require.NoError(t, rows.Scan(&actor, &outcome, &outboxID))
		require.Equal(t, rid, outboxID)
		trail = append(trail, actor+": "+strings.SplitN(outcome, ":", 2)[0])
	}
	require.NoError(t, rows.Err())
	require.Len(t, trail, 4, "%v", trail)
	require.Equal(t, "oscar: ok", trail[2])
}
