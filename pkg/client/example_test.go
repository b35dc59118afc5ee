package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/wire"
)

// An agent submits the tool call its model proposed and waits until the
// operation is final or waits on a person. It needs a running opledger
// (go run ./cmd/opledger dev) at NATS_URL, so it has no checked output.
func ExampleClient_SubmitAndWait() {
	cl, err := client.Connect(os.Getenv("NATS_URL"), "support-bot")
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	res, err := cl.SubmitAndWait(ctx, wire.Intent{
		EventID:    "conv_1:call_1", // the model's tool-call id, scoped by conversation
		WorkflowID: "wf_1",
		Tool:       "capture_payment",
		Args:       json.RawMessage(`{"order_id":"order_123","customer_id":"cust_456","amount_cents":4900,"currency":"USD"}`),
	})
	switch {
	case err != nil:
		log.Printf("no final result yet (last: %s): %v", res.Status, err)
	case res.Status == client.StatusCompletedSuccess:
		fmt.Println("charged:", res.ExternalObjectID)
	case res.Status.NeedsPerson():
		fmt.Println("waiting on a person:", res.SafeUserMessage)
	default:
		fmt.Println(res.Status, res.Decision(), res.Reason)
	}
}
