package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/examples"
	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/regedit"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// cli runs opledger commands as a user would, with an environment of its own.
type cli struct {
	t   *testing.T
	env map[string]string
}

// run runs opledger with args as actor ("" keeps the environment's
// token as it is) and returns the exit code, stdout and stderr.
func (c cli) run(actor string, args ...string) (int, string, string) {
	c.t.Helper()
	vars := map[string]string{}
	for k, v := range c.env {
		vars[k] = v
	}
	if actor != "" {
		vars["OPLEDGER_API_TOKEN"] = c.env["token:"+actor]
	}
	env := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	var out, errOut strings.Builder
	code := run(args, env, &out, &errOut)
	return code, out.String(), errOut.String()
}

var tokenRE = regexp.MustCompile(`(?m)^  (opl_[A-Za-z0-9_-]{43})$`)

// The CLI against a real stack: tokens made with "opledger token" go into
// the tokens file the stack loads; then list, show, approve (showing what
// is approved), deny, cancel, resolve and compensate, with the exit codes
// a script relies on.
func TestOpsCLI(t *testing.T) {
	t.Parallel()
	c := cli{t: t, env: map[string]string{}}
	var lines []string
	for _, a := range [][2]string{{"alice", "approver"}, {"bob", "approver"}, {"agent-7", "approver"},
		{"oscar", "operator"}, {"vera", "viewer"}, {"root", "admin"}} {
		code, out, errOut := c.run("", "token", "-actor", a[0], "-role", a[1])
		require.Equal(t, 0, code, errOut)
		m := tokenRE.FindStringSubmatch(out)
		require.NotNil(t, m, out)
		c.env["token:"+a[0]] = m[1]
		line := out[strings.Index(out, "- {actor: "):]
		require.Equal(t, 1, strings.Count(out, m[1]), "the token is printed once")
		require.NotContains(t, line, m[1], "the file's line holds the hash, not the token")
		lines = append(lines, strings.TrimSpace(line))
	}
	code, _, _ := c.run("", "token", "-actor", "x", "-role", "boss")
	require.Equal(t, 2, code)
	code, _, _ = c.run("", "token", "-actor", "bad actor", "-role", "admin")
	require.Equal(t, 2, code)

	path := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	tokens, err := api.LoadTokens(path)
	require.NoError(t, err)
	reg, err := regedit.Set(examples.Registry, "approval.approvals_required", "2", func(tl regedit.Tool) bool { return tl.Name == "capture_payment" })
	require.NoError(t, err)
	d, err := app.StartStack(context.Background(), app.StackConfig{
		Infra:    app.InfraConfig{DatabaseURL: testdb.New(t), MemoryStreams: true},
		Registry: app.RegistryConfig{YAML: reg}, HTTPAddr: "127.0.0.1:0", APITokens: tokens,
	})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	c.env["OPLEDGER_API_URL"] = d.HTTP.URL()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agent, err := client.Connect(d.Infra.NATSURL, "cli-test-agent")
	require.NoError(t, err)
	defer agent.Close()
	propose := func(order string, cents int) string {
		res, err := agent.SubmitAndWait(ctx, wire.Intent{EventID: "conv_cli:" + order, WorkflowID: "wf_cli", Tool: "capture_payment",
			Args:  json.RawMessage(`{"order_id":"` + order + `","customer_id":"cust_1","amount_cents":` + strconv.Itoa(cents) + `,"currency":"USD"}`),
			Actor: &wire.Actor{Type: "agent", ID: "agent-7"}})
		require.NoError(t, err)
		require.NotEmpty(t, res.OperationID, res.Reason)
		return res.OperationID
	}

	code, out, errOut := c.run("vera", "ops", "list")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "no operations\n", out)

	id := propose("order_cli", 2000000)
	code, out, errOut = c.run("vera", "ops", "list", "-state", "awaiting_approval")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^ID\s+TOOL\s+STATE\s+AGE\s+WORKFLOW\s+KEY\n`, out)
	require.Regexp(t, id+`\s+capture_payment\s+awaiting_approval\s+\d+s\s+wf_cli\s+payment:order_cli:capture:2000000:USD:v1\n`, out)
	code, out, _ = c.run("vera", "ops", "list", "-state", "escalated")
	require.Equal(t, 0, code)
	require.Equal(t, "no operations\n", out)
	code, out, _ = c.run("vera", "ops", "list", "-json", "-tool", "capture_payment", "-limit", "5")
	require.Equal(t, 0, code)
	var list api.ListResponse
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Operations, 1)
	hash := list.Operations[0].ArgsHash

	code, out, errOut = c.run("vera", "ops", "show", id)
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{"operation", id, "awaiting_approval", "agent-7", hash, `"order_id":"order_cli"`,
		"pending, 0 of 2 approvals", "timeline", "create", "require_approval", "planned → awaiting_approval"} {
		require.Contains(t, out, want)
	}

	// approve: the proposer is refused (exit 1, why on stderr); alice is
	// shown the arguments and their hash, and approves exactly that hash.
	code, _, errOut = c.run("agent-7", "ops", "approve", id, "-reason", "mine")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "proposed this call")
	require.Contains(t, errOut, "403 forbidden")
	code, _, errOut = c.run("alice", "ops", "approve", id)
	require.Equal(t, 2, code, "a write needs -reason")
	require.Contains(t, errOut, "-reason is required")
	code, out, errOut = c.run("alice", "ops", "approve", id, "-reason", "customer confirmed by phone")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "args_hash  "+hash)
	require.Contains(t, out, `"amount_cents":2000000`)
	require.Contains(t, out, "still awaiting approval: pending, 1 of 2 approvals")
	code, _, errOut = c.run("bob", "ops", "approve", "-args-hash", strings.Repeat("0", 64), "-reason", "wrong one", id)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "409 conflict")
	code, out, errOut = c.run("bob", "ops", "approve", id, "-args-hash", hash, "-reason", "second pair of eyes")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "approved "+id+": pending_dispatch")
	code, _, errOut = c.run("bob", "ops", "approve", id, "-args-hash", hash, "-reason", "second pair of eyes")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "409 invalid_state")

	// deny and cancel; a viewer may not.
	denied, cancelled := propose("order_deny", 3000000), propose("order_cancel", 4000000)
	code, _, errOut = c.run("vera", "ops", "deny", denied, "-reason", "I only look")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "403 forbidden")
	code, out, errOut = c.run("bob", "ops", "deny", denied, "-reason", "does not match the invoice")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "denied "+denied+": rejected\n", out)
	code, out, errOut = c.run("oscar", "ops", "cancel", cancelled, "-reason", "customer withdrew")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "cancelled "+cancelled+": cancelled\n", out)

	// resolve needs an escalated operation; compensate the approved capture
	// once it completed.
	code, _, errOut = c.run("oscar", "ops", "resolve", denied, "-verdict", "applied", "-object-id", "ch_1", "-reason", "x")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not escalated")
	code, _, _ = c.run("oscar", "ops", "resolve", denied, "-verdict", "maybe", "-reason", "x")
	require.Equal(t, 2, code)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, out, _ = c.run("vera", "ops", "show", id)
		if strings.Contains(out, "completed_success") || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Contains(t, out, "dispatch")
	require.Contains(t, out, "attempts")
	code, out, errOut = c.run("root", "ops", "compensate", id, "-reason", "goods returned")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^compensation op_\w+ \(refund_payment\) of `+id+`: awaiting_approval\n`, out)
	require.Contains(t, out, "needs approval by someone other than you")
	compOut := out
	code, out, _ = c.run("vera", "ops", "show", id, "-json")
	require.Equal(t, 0, code)
	var detail struct {
		Operation op.Operation `json:"operation"`
		Audit     []struct {
			Actor, Action, Outcome string
		} `json:"audit"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &detail))
	require.Equal(t, op.StateCompensating, detail.Operation.State)
	compID := regexp.MustCompile(`^compensation (op_\w+) `).FindStringSubmatch(compOut)[1]
	require.Equal(t, compID, detail.Operation.CompensationID, "the original links to its compensation")
	code, out, _ = c.run("vera", "ops", "show", id)
	require.Equal(t, 0, code)
	require.Regexp(t, `compensation\s+`+compID+`\n`, out)
	require.Len(t, detail.Audit, 6, "agent-7's refusal, alice, bob's wrong hash, bob, bob's replay, root")

	// Who may call at all, and the command line.
	code, _, errOut = c.run("", "ops", "list", "-token", "opl_not-a-configured-token")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "401 unauthenticated")
	require.NotContains(t, errOut, "opl_not-a-configured-token")
	c.env["OPLEDGER_API_TOKEN"] = ""
	code, _, errOut = c.run("", "ops", "list")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "OPLEDGER_API_TOKEN")
	code, _, errOut = c.run("vera", "ops", "list", "-api", "http://127.0.0.1:1")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "did not answer")
	for _, args := range [][]string{{"ops", "-h"}, {"ops", "list", "-h"}, {"ops", "show", "-h"}, {"ops", "approve", "-h"}, {"token", "-h"}} {
		code, out, errOut := c.run("vera", args...)
		require.Equal(t, 0, code, "%v", args)
		require.Contains(t, strings.ToLower(out+errOut), "usage", "%v", args)
	}
	for _, args := range [][]string{{"ops"}, {"ops", "nope"}, {"ops", "show"}, {"ops", "show", "a", "b"}, {"ops", "list", "extra"},
		{"ops", "list", "-api", "ftp://x"}, {"ops", "cancel", id}} {
		code, _, _ := c.run("vera", args...)
		require.Equal(t, 2, code, "%v", args)
	}
}

// Text from the ledger reaches a terminal without escape sequences or
// bidirectional overrides.
func TestCleanForTerminal(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a?[31mb?c?d é😀", clean("a\x1b[31mb\u202ec\u009bd é😀"))
}

// The CLI reads the API's answers one way: a status given twice, or in
// another case, is refused rather than the last or the case-folded one
// printed (an operator would act on what a proxy in front did not see).
func TestOpsReadsAnswersOneWay(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"operations":[{"operation_id":"op_1","tool":"t","status":"failed_permanent","status":"completed_success"}]}`: `field "operations[0].status" appears twice`,
		`{"operations":[{"operation_id":"op_1","tool":"t","STATUS":"completed_success"}]}`:                             `unknown field "operations[0].STATUS"`,
		`{"operations":[{"operation_id":"op_1","tool":"t","status":"completed_success","new_field":1}]}`:               "",
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(body))
		}))
		c := cli{t: t, env: map[string]string{"OPLEDGER_API_URL": srv.URL, "OPLEDGER_API_TOKEN": "opl_x"}}
		code, out, errOut := c.run("", "ops", "list")
		srv.Close()
		if want == "" {
			require.Equal(t, 0, code, errOut)
			require.Contains(t, out, "op_1", "a field added by a newer API is ignored")
			continue
		}
		require.Equal(t, 1, code, out)
		require.Contains(t, errOut, want)
	}
}
