package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testlog"
)

// warnings returns the warning lines with message msg in logs, and the
// sum of the counts of lines left out that they carry.
func warnings(t *testing.T, logs *testlog.Buffer, msg string) (lines, held int) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var line struct {
			Level   string `json:"level"`
			Message string `json:"message"`
			Held    int    `json:"refusals_not_logged_before"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), sc.Text())
		if line.Level == "warn" && line.Message == msg {
			lines++
			held += line.Held
		}
	}
	return lines, held
}

// A flood of refused tokens is a bounded number of warnings, each refusal
// either a line of its own or counted in the next line written, and every
// one in the metric. Breaking it: a warning per refusal (the lines then
// number 51), or a held-back count that is lost or counted twice.
func TestGuardFloodLogsBounded(t *testing.T) {
	t.Parallel()
	_, entry, err := api.GenerateToken("prom", ops.RoleMetrics)
	require.NoError(t, err)
	tokens, err := api.NewTokens([]api.TokenEntry{entry})
	require.NoError(t, err)
	var logs testlog.Buffer
	reg := prometheus.NewRegistry()
	g, err := api.NewGuard(api.GuardConfig{Tokens: tokens, Registerer: reg, Log: zerolog.New(&logs)})
	require.NoError(t, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	refuse := func() {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.RemoteAddr = "10.1.2.3:5000"
		req.Header.Set("Authorization", "Bearer opl_nope")
		rec := httptest.NewRecorder()
		g.Probe(ok).ServeHTTP(rec, req)
		require.Equal(t, http.StatusUnauthorized, rec.Code)
	}
	start := time.Now()
	for range 50 {
		refuse()
	}
	flood := time.Since(start)
	time.Sleep(1100 * time.Millisecond) // past the limit's period: the next line is written
	refuse()

	const msg = "api: request refused before authentication"
	lines, held := warnings(t, &logs, msg)
	require.Equal(t, 51, lines+held, "every refusal logged or counted once")
	if flood < time.Second {
		require.LessOrEqual(t, lines, 10+1, "one period's burst, then the line after it")
	}
	require.Positive(t, held)
	require.Equal(t, 51.0, unauthorized(t, reg, "unknown"))
}

// The same for refused intents, over HTTP, against a real ledger (each
// refusal is audited there, as before).
func TestIntentFloodLogsBounded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dbURL := testdb.New(t)
	st, err := store.Open(ctx, dbURL, store.Options{})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	token, entry, err := api.GenerateAgentToken("bot", "default", "")
	require.NoError(t, err)
	tokens, err := api.NewTokens([]api.TokenEntry{entry})
	require.NoError(t, err)
	var logs testlog.Buffer
	log := zerolog.New(&logs)
	reg := prometheus.NewRegistry()
	a, err := api.New(api.Config{Ops: ops.New(st, nil), Tokens: tokens, Log: log, Registerer: reg})
	require.NoError(t, err)
	in, err := api.NewIntents(api.IntentsConfig{API: a, Log: log}) // no doors: every intent is refused, 503
	require.NoError(t, err)
	mux := http.NewServeMux()
	a.Mount(mux)
	in.Mount(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	postBody := func(body string, status int) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/intents", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		readAll(t, resp)
		require.Equal(t, status, resp.StatusCode)
	}
	post := func() {
		postBody(capture("wf_flood:call_1", "wf_flood", "ord_flood", 100), http.StatusServiceUnavailable)
	}
	start := time.Now()
	for range 30 {
		post()
	}
	flood := time.Since(start)
	time.Sleep(1100 * time.Millisecond)
	post()

	lines, held := warnings(t, &logs, "api: intent refused")
	require.Equal(t, 31, lines+held, "every refusal logged or counted once")
	// At most 10 lines in each second the flood lasted (a second per
	// started period), and the line after the pause.
	require.LessOrEqual(t, lines, 10*(int(flood/time.Second)+1)+1, "flood of %s", flood)
	db, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	var audited int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'submit_intent'`).Scan(&audited))
	require.Equal(t, 31, audited, "every refusal still audited")
	require.Equal(t, 31.0, counter(t, reg, "opledger_api_refused_total", "unavailable"), "and counted")

	// A refusal with a reason of its own (a body that is not JSON) is
	// counted by it too.
	postBody("{", http.StatusBadRequest)
	require.Equal(t, 1.0, counter(t, reg, "opledger_api_refused_total", api.ReasonNotJSON))
}
