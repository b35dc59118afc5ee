package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/testdb"
)

// "opledger ops parked" lists the messages NATS refused until they were
// parked, and "opledger ops requeue" puts one back, as an operator only and
// with a reason. Breaking it: parked rows that only a log line names.
func TestOpsParkedCLI(t *testing.T) {
	t.Parallel()
	c := cli{t: t, env: map[string]string{}}
	var lines []string
	for _, a := range [][2]string{{"oscar", "operator"}, {"vera", "viewer"}} {
		code, out, errOut := c.run("", "token", "-actor", a[0], "-role", a[1])
		require.Equal(t, 0, code, errOut)
		c.env["token:"+a[0]] = tokenRE.FindStringSubmatch(out)[1]
		lines = append(lines, strings.TrimSpace(out[strings.Index(out, "- {actor: "):]))
	}
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	tokens, err := api.LoadTokens(path)
	require.NoError(t, err)
	d, err := app.StartStack(context.Background(), app.StackConfig{
		Infra: app.InfraConfig{DatabaseURL: testdb.New(t), MemoryStreams: true}, HTTPAddr: "127.0.0.1:0", APITokens: tokens,
	})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	c.env["OPLEDGER_API_URL"] = d.HTTP.URL()

	code, out, errOut := c.run("vera", "ops", "parked")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "no parked messages\n", out)

	db, err := pgx.Connect(context.Background(), d.Infra.DatabaseURL)
	require.NoError(t, err)
	defer db.Close(context.Background())
	var id int64
	require.NoError(t, db.QueryRow(context.Background(), `INSERT INTO outbox (subject, msg_id, payload, publish_failures, last_error, parked_at)
		VALUES ('opledger.results.wf_cli', 'msg_cli_parked', '{}', 5, 'nats: maximum payload exceeded', now()) RETURNING id`).Scan(&id))
	rid := strconv.FormatInt(id, 10)

	code, out, errOut = c.run("vera", "ops", "parked")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^ID\s+PARKED\s+FAILURES\s+BYTES\s+SUBJECT\s+OPERATION\s+LAST ERROR\n`+rid+`\s+\d+s\s+5\s+2\s+opledger.results.wf_cli\s+nats: maximum payload exceeded\n$`, out)
	code, out, _ = c.run("vera", "ops", "parked", "-json")
	require.Equal(t, 0, code)
	var list api.ParkedResponse
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Equal(t, int64(1), list.Total)

	code, _, errOut = c.run("vera", "ops", "requeue", rid, "-reason", "raised max_payload")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "403 forbidden")
	code, _, _ = c.run("oscar", "ops", "requeue", rid)
	require.Equal(t, 2, code, "a reason is required")
	code, _, _ = c.run("oscar", "ops", "requeue", "msg_cli_parked", "-reason", "x")
	require.Equal(t, 2, code, "the outbox row id, not the message id")
	code, out, errOut = c.run("oscar", "ops", "requeue", rid, "-reason", "raised max_payload")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "requeued "+rid+" (opledger.results.wf_cli): published again shortly\n", out)
	code, _, errOut = c.run("oscar", "ops", "requeue", rid, "-reason", "again")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "404 not_found")
}
