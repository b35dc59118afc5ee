// Command client submits one capture_payment intent to opledger and prints
// the ledger's answer and the operation's final result, using pkg/client.
//
// Start opledger with everything embedded in one terminal:
//
//	go run ./cmd/opledger dev
//
// It prints the embedded NATS server's URL ("nats: embedded JetStream at
// nats://127.0.0.1:<port>"; the port changes on every run). In another
// terminal, point the example at it:
//
//	NATS_URL=nats://127.0.0.1:<port> go run ./examples/client
//
// NATS_URL defaults to nats://127.0.0.1:4222. Run it again with the same
// -event-id to see a resend answered with the first answer, or with a new
// -event-id and the same -order to see duplicate_operation: either way the
// card is charged once. An -amount over 1000000 cents needs approval, so the
// wait ends at awaiting_approval.
//
// Against compose.yaml's NATS (deploy/nats/nats.conf), connect as a tenant's
// agent:
//
//	go run ./examples/client -tenant acme -nats-user agent-acme \
//	    -nats-password-file deploy/nats/secrets/agent-acme.password
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func main() {
	if err := run(os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
}

func run(argv []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	eventID := fs.String("event-id", fmt.Sprintf("conv_example:call_%d", time.Now().UnixNano()),
		"the intent's event id (reuse it to resend the same call)")
	workflow := fs.String("workflow", "wf_example", "workflow id; results go to opledger.results.<workflow>")
	order := fs.String("order", "order_123", "order to capture the payment for")
	amount := fs.Int("amount", 4900, "amount in cents")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the final result")
	tenant := fs.String("tenant", "", "tenant to act for (default: the default tenant)")
	user := fs.String("nats-user", "", "NATS user (a tenant's agent)")
	pwFile := fs.String("nats-password-file", "", "file holding the NATS user's password")
	_ = fs.Parse(argv) // ExitOnError: a bad flag exits 2, -h exits 0

	url := getenv("NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	opts := []client.Option{client.Tenant(*tenant)}
	if *user != "" {
		pw, err := os.ReadFile(*pwFile)
		if err != nil {
			return err
		}
		opts = append(opts, client.NATSOptions(nats.UserInfo(*user, strings.TrimSpace(string(pw)))))
	}
	cl, err := client.Connect(url, "example-agent", opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if *user != "" {
		// With an account per tenant, the tenant keeps its own RESULTS.
		ectx, ecancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ecancel()
		if err := cl.EnsureResultsStream(ectx, 0); err != nil {
			return err
		}
	}

	args, err := json.Marshal(map[string]any{
		"order_id": *order, "customer_id": "cust_456", "amount_cents": *amount, "currency": "USD",
	})
	if err != nil {
		return err
	}
	in := wire.Intent{EventID: *eventID, WorkflowID: *workflow, Tool: "capture_payment", Args: args,
		Actor: &wire.Actor{Type: "agent", ID: "example-agent"}}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ans, err := cl.Submit(ctx, in)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "answer to %s: %s, operation %q, status %s\n", ans.EventID, ans.Decision(), ans.OperationID, ans.Status)
	if ans.Decision() == op.DecisionConflict || ans.Decision() == op.DecisionRejected {
		fmt.Fprintf(stdout, "refused: %s\n", ans.Reason)
		return nil
	}

	// SubmitAndWait publishes again under the same event id: the ledger
	// answers the resend duplicate_event, and the wait follows the same
	// operation.
	res, err := cl.SubmitAndWait(ctx, in)
	if errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(stdout, "still %s after %s; opledger keeps working on it\n", res.Status, *timeout)
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case res.Status.NeedsPerson():
		fmt.Fprintf(stdout, "waiting on a person: %s (%s)\n", res.Status, res.SafeUserMessage)
	default:
		fmt.Fprintf(stdout, "final: %s, version %d, vendor object %q: %s\n", res.Status, res.Version, res.ExternalObjectID, res.SafeUserMessage)
	}
	return nil
}
