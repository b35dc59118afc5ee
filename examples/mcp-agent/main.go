// Command mcp-agent is an agent loop that uses opledger through MCP, with
// the official Go SDK's client, and shows what happens when a tool call ran
// but its response was lost: the agent re-plans, calls again with a new
// tool-call id, and opledger answers with the same operation. One charge.
//
// The "model" here is a script (no LLM): it plans a capture, loses the
// first answer (-lose-first: the call is cancelled once opledger reported
// the operation in progress), re-plans, then sends the receipt email and
// lists what this conversation did, receipts included.
//
// Start opledger in one terminal:
//
//	go run ./cmd/opledger dev
//
// and run the agent against its NATS (the URL dev prints) in another; it
// starts `opledger mcp serve` itself on stdio:
//
//	NATS_URL=nats://127.0.0.1:<port> go run ./examples/mcp-agent
//
// or point it at a server already serving streamable HTTP
// (`opledger mcp serve -workflow wf_agent -http 127.0.0.1:8481`):
//
//	go run ./examples/mcp-agent -url http://127.0.0.1:8481/mcp
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	url := flag.String("url", "", "streamable HTTP endpoint of an opledger MCP server (default: start one on stdio)")
	server := flag.String("server", "go run ./cmd/opledger mcp serve -log error -workflow wf_agent", "command that serves opledger's MCP on stdio")
	order := flag.String("order", fmt.Sprintf("order_%d", time.Now().Unix()), "the order to charge")
	conv := flag.String("conversation", fmt.Sprintf("conv_%d", time.Now().UnixNano()), "the conversation id")
	lose := flag.Bool("lose-first", true, "lose the first call's response after it started")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var t mcp.Transport = &mcp.StreamableClientTransport{Endpoint: *url}
	if *url == "" {
		parts := strings.Fields(*server)
		cmd := exec.Command(parts[0], parts[1:]...)
		cmd.Stderr = os.Stderr
		t = &mcp.CommandTransport{Command: cmd}
	}
	if err := Run(ctx, t, Script{Order: *order, Conversation: *conv, LoseFirst: *lose}, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mcp-agent:", err)
		os.Exit(1)
	}
}

// Script is what the scripted model does.
type Script struct {
	Order, Conversation string
	// LoseFirst cancels the first call once it is in progress: the call
	// ran, its response never arrives.
	LoseFirst bool
}

// Outcome is what a tool call came to, as the agent reads structuredContent.
type Outcome struct {
	OperationID         string `json:"operation_id"`
	Status              string `json:"status"`
	Decision            string `json:"decision"`
	Replayed            bool   `json:"replayed"`
	RetryRecommendation string `json:"retry_recommendation"`
	SafeUserMessage     string `json:"safe_user_message"`
	ExternalObjectID    string `json:"external_object_id"`
	Next                string `json:"next"`
	Receipt             struct {
		Text string `json:"text"`
	} `json:"receipt"`
}

// Run connects over t and runs the script, printing what happens to out.
func Run(ctx context.Context, t mcp.Transport, s Script, out io.Writer) error {
	progress := make(chan string, 16)
	c := mcp.NewClient(&mcp.Implementation{Name: "mcp-agent-example", Version: "v1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			select {
			case progress <- r.Params.Message:
			default:
			}
		}})
	cs, err := c.Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer cs.Close()
	charge := map[string]any{"order_id": s.Order, "customer_id": "cust_42", "amount_cents": 4900, "currency": "USD"}

	fmt.Fprintf(out, "model: capture_payment %s (tool call call_1)\n", s.Order)
	first := ctx
	var stop context.CancelFunc = func() {}
	if s.LoseFirst {
		first, stop = context.WithCancel(ctx)
		go func() {
			select {
			case m := <-progress:
				fmt.Fprintf(out, "  progress: %s\n", m)
				stop() // the answer is lost: the connection drops, the agent times out
			case <-first.Done():
			}
		}()
	}
	res, err := call(first, cs, "capture_payment", charge, s.Conversation, "call_1")
	stop()
	switch {
	case err != nil && s.LoseFirst:
		fmt.Fprintln(out, "  the response was lost (the call ran); the model re-plans with a new tool-call id")
	case err != nil:
		return err
	default:
		report(out, res)
	}

	fmt.Fprintf(out, "model: capture_payment %s again (tool call call_2)\n", s.Order)
	if res, err = call(ctx, cs, "capture_payment", charge, s.Conversation, "call_2"); err != nil {
		return err
	}
	report(out, res)
	if res.Status != "completed_success" {
		return fmt.Errorf("the capture is %s: %s", res.Status, res.Next)
	}

	fmt.Fprintln(out, "model: send_email payment_receipt (tool call call_3)")
	mail := map[string]any{"to": "customer42@example.com", "template": "payment_receipt", "reference": s.Order}
	if res, err = call(ctx, cs, "send_email", mail, s.Conversation, "call_3"); err != nil {
		return err
	}
	report(out, res)

	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_operations", Arguments: map[string]any{},
		Meta: mcp.Meta{"dev.opledger/conversation_id": s.Conversation}})
	switch {
	case err != nil, r.IsError:
		fmt.Fprintln(out, "(list_operations is offered when the server has -api and a viewer token)")
	default:
		for _, c := range r.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				fmt.Fprintln(out, tc.Text)
			}
		}
	}
	return nil
}

func call(ctx context.Context, cs *mcp.ClientSession, tool string, args map[string]any, conv, callID string) (Outcome, error) {
	p := &mcp.CallToolParams{Name: tool, Arguments: args, Meta: mcp.Meta{
		"dev.opledger/conversation_id": conv, "dev.opledger/tool_call_id": callID}}
	p.SetProgressToken(callID)
	r, err := cs.CallTool(ctx, p)
	if err != nil {
		return Outcome{}, err
	}
	raw, err := json.Marshal(r.StructuredContent)
	if err != nil {
		return Outcome{}, err
	}
	var o Outcome
	if err := json.Unmarshal(raw, &o); err != nil || o.Status == "" {
		return Outcome{}, errors.New("the answer has no opledger result")
	}
	return o, nil
}

func report(out io.Writer, o Outcome) {
	fmt.Fprintf(out, "  %s %s (decision %s, replayed %v): %s\n", o.OperationID, o.Status, o.Decision, o.Replayed, o.SafeUserMessage)
	if o.Receipt.Text != "" {
		fmt.Fprintf(out, "  %s\n", o.Receipt.Text)
	}
	fmt.Fprintf(out, "  next: %s\n", o.Next)
}
