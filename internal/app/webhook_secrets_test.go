package app_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/internal/testdb"
)

// planner-ingest's binary takes each webhook provider's signing secrets at
// its edge: from OPLEDGER_WEBHOOK_SECRETS_<PROVIDER> (several, for
// rotation) and from -webhook-secrets-file, and serves POST
// /webhooks/{provider} on its HTTP address; a provider without a secret
// refuses deliveries; a malformed secret stops it at start without saying
// the secret.
func TestPlannerIngestTakesWebhookSecretsAtItsEdge(t *testing.T) {
	t.Parallel()
	const newSecret, oldSecret = "whsec_dGVzdC1vbmx5LW5vdC1hLXNlY3JldA==", "whsec_b2xkLXRlc3Qtb25seS1ub3QtYS1zZWNyZXQ="
	const stripeSecret = "whsec_test_only_not_a_real_stripe_secret"
	file := filepath.Join(t.TempDir(), "payment_intents")
	require.NoError(t, os.WriteFile(file, []byte(stripeSecret+"\n"), 0o600))

	// A malformed secret: refused before anything starts, and not quoted.
	cfg, err := app.ParseServiceFlags(app.PlannerIngest, []string{"-log", "disabled"},
		env(map[string]string{"DATABASE_URL": "postgres://x", "NATS_URL": "nats://x", "OPLEDGER_WEBHOOK_SECRETS_PAYMENTS": "whsec_!!!!"}), io.Discard)
	require.NoError(t, err)
	err = app.RunService(context.Background(), cfg)
	require.ErrorContains(t, err, "webhook provider payments (OPLEDGER_WEBHOOK_SECRETS_PAYMENTS): secret 1")
	require.NotContains(t, err.Error(), "!!!!")

	url := testdb.New(t)
	ns, err := natsembed.Start(natsembed.Options{})
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg, err = app.ParseServiceFlags(app.PlannerIngest, []string{"-log", "disabled", "-http", httpAddr, "-webhook-secrets-file", "payment_intents=" + file},
		env(map[string]string{"DATABASE_URL": url, "NATS_URL": ns.URL(), "OPLEDGER_WEBHOOK_SECRETS_PAYMENTS": newSecret + " " + oldSecret}), io.Discard)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.RunService(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	post := func(provider string, h http.Header, body []byte) int {
		req, err := http.NewRequest(http.MethodPost, "http://"+httpAddr+"/webhooks/"+provider, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header = h
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	standard := func(secret, id string, body []byte) http.Header {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		require.NoError(t, err)
		ts := time.Now().Unix()
		mac := hmac.New(sha256.New, key)
		fmt.Fprintf(mac, "%s.%d.%s", id, ts, body)
		return http.Header{"Webhook-Id": {id}, "Webhook-Timestamp": {strconv.FormatInt(ts, 10)},
			"Webhook-Signature": {"v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))}}
	}
	body := []byte(`{"type":"payment.refreshed","data":{}}`)
	require.Eventually(t, func() bool { return post("payments", standard(newSecret, "msg_1", body), body) == http.StatusOK },
		30*time.Second, 50*time.Millisecond, "signed with the new secret")
	require.Equal(t, http.StatusOK, post("payments", standard(oldSecret, "msg_2", body), body), "and with the one being retired")
	require.Equal(t, http.StatusServiceUnavailable, post("email", standard(newSecret, "msg_3", body), body), "email has no secret")

	sbody := []byte(`{"id":"evt_1","type":"payment_intent.created","data":{"object":{}}}`)
	ts := time.Now().Unix()
	mac := hmac.New(sha256.New, []byte(stripeSecret))
	fmt.Fprintf(mac, "%d.%s", ts, sbody)
	sh := http.Header{"Stripe-Signature": {fmt.Sprintf("t=%d,v1=%s", ts, hex.EncodeToString(mac.Sum(nil)))}}
	require.Equal(t, http.StatusOK, post("payment_intents", sh, sbody), "the secret from the file")
}
