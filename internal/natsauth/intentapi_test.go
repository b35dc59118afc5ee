package natsauth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/natsauth"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testlog"
	"github.com/opledger/opledger/pkg/op"
)

// planner-ingest's HTTP intent API on the shipped configuration: given the
// agents' passwords (OPLEDGER_INTENT_NATS_SECRETS, genpasswd's secrets
// directory) it submits each agent token's intents as that token's
// tenant's NATS agent (agent-acme, in account ACME), so NATS itself holds
// it to the tenant's subjects, and reads the answer from the tenant's own
// RESULTS stream. (Without them it would submit as planner-ingest, which
// the configuration does not let publish intents: TestServiceDenials.) No
// password reaches the logs. Breaking it: the API connecting with the
// service's credentials (its publish refused: 503), or with the service's
// inbox (no reply reaches the agent's connection).
func TestIntentAPISubmitsAsTheTenantsAgent(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	dbURL := testdb.New(t)
	token, entry, err := api.GenerateAgentToken("bot", "acme", "")
	require.NoError(t, err)
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(tokens, []byte(entry.Line()+"\n"), 0o600))

	start := func(secrets string) (string, *testlog.Buffer) {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		vars := map[string]string{"DATABASE_URL": dbURL, "NATS_URL": s.url, "OPLEDGER_HTTP_ADDR": addr, "OPLEDGER_API_TOKENS": tokens,
			"OPLEDGER_NATS_USER": app.PlannerIngest, "OPLEDGER_NATS_PASSWORD_FILE": natsauth.PasswordFile(s.dir, app.PlannerIngest)}
		if secrets != "" {
			vars["OPLEDGER_INTENT_NATS_SECRETS"] = secrets
		}
		logs := &testlog.Buffer{}
		// Open to loopback for the readiness probe below: the only token
		// here is an agent's, which reads no process metrics.
		cfg, err := app.ParseServiceFlags(app.PlannerIngest, []string{"-log", "debug", "-log-format", "json", "-http-open-loopback"}, func(k string) (string, bool) {
			v, ok := vars[k]
			if !ok && strings.HasPrefix(k, "OPLEDGER_VENDOR_") {
				return "http://127.0.0.1:9", true // nothing is dispatched here
			}
			return v, ok
		}, logs)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- app.RunService(ctx, cfg) }()
		t.Cleanup(func() {
			cancel()
			<-done
		})
		require.Eventually(t, func() bool {
			resp, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.StatusCode == http.StatusOK
		}, 30*time.Second, 50*time.Millisecond, "planner-ingest ready as its NATS user")
		return "http://" + addr, logs
	}
	post := func(base, event string) (int, map[string]any) {
		body := fmt.Sprintf(`{"spec":"opledger.intent.v1","event_id":%q,"workflow_id":"wf_1","tool":"capture_payment",`+
			`"args":{"order_id":"order_1","customer_id":"cust_1","amount_cents":4900,"currency":"USD"}}`, event)
		req, err := http.NewRequest("POST", base+"/v1/intents", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp.StatusCode, out
	}

	withSecrets, logs := start(filepath.Join(s.dir, "secrets"))
	code, res := post(withSecrets, "conv_1:call_1")
	require.Equal(t, http.StatusAccepted, code, "%v", res) // no dispatcher runs: it waits
	require.Equal(t, string(op.DecisionNew), res["decision"])
	require.Equal(t, string(op.StatePendingDispatch), res["status"])
	code, res = post(withSecrets, "conv_1:call_1")
	require.Equal(t, http.StatusAccepted, code, "%v", res)
	require.Equal(t, string(op.DecisionDuplicateEvent), res["decision"])
	require.Contains(t, logs.String(), `"nats_user":"agent-acme"`)

	for user, pw := range s.secrets {
		require.NotContains(t, logs.String(), pw, "the password of %s is in the logs", user)
	}
}
