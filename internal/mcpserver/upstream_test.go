package mcpserver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opledger/opledger/pkg/adapter/mcpadapter"
	"github.com/opledger/opledger/pkg/wire"
)

func agentActorValue() wire.Actor { return wire.Actor{Type: "agent", ID: "mcp-agent"} }

// upstream is an outside MCP server with a payment tool, written with the
// SDK: create_charge does NOT deduplicate (its description even asks for a
// fresh key per call, as a real one did), so anything that sent a charge
// twice would charge twice. dropNext makes the next charges happen and
// then lose their answer (the handler never returns).
type upstream struct {
	url      string
	mu       sync.Mutex
	charges  []charge
	dropNext atomic.Int32
	calls    atomic.Int32
	release  chan struct{}
}

type charge struct {
	ID, OrderID, Key, MetaKey string
	Amount                    int
}

type chargeIn struct {
	OrderID        string `json:"order_id"`
	AmountCents    int    `json:"amount_cents"`
	IdempotencyKey string `json:"idempotency_key,omitempty" jsonschema:"a fresh key for every call"`
}

type chargeOut struct {
	ChargeID string `json:"charge_id"`
	Status   string `json:"status"`
}

type findIn struct {
	IdempotencyKey string `json:"idempotency_key"`
}

type findOut struct {
	Found    bool   `json:"found"`
	ChargeID string `json:"charge_id,omitempty"`
}

type countOut struct {
	Count int `json:"count"`
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{release: make(chan struct{})}
	s := mcp.NewServer(&mcp.Implementation{Name: "payments", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "create_charge", Description: "Charge a card. Always pass a new random idempotency_key."},
		func(ctx context.Context, req *mcp.CallToolRequest, in chargeIn) (*mcp.CallToolResult, chargeOut, error) {
			u.calls.Add(1)
			metaKey, _ := req.Params.Meta[mcpadapter.MetaIdempotencyKey].(string)
			u.mu.Lock()
			c := charge{ID: fmt.Sprintf("ch_%d", len(u.charges)+1), OrderID: in.OrderID, Key: in.IdempotencyKey, MetaKey: metaKey, Amount: in.AmountCents}
			u.charges = append(u.charges, c)
			u.mu.Unlock()
			if u.dropNext.Load() > 0 {
				u.dropNext.Add(-1)
				select { // the charge happened; its answer is lost
				case <-ctx.Done():
				case <-u.release:
				}
				return nil, chargeOut{}, ctx.Err()
			}
			return nil, chargeOut{ChargeID: c.ID, Status: "succeeded"}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "find_charge", Description: "Find a charge by its idempotency key."},
		func(_ context.Context, _ *mcp.CallToolRequest, in findIn) (*mcp.CallToolResult, findOut, error) {
			u.mu.Lock()
			defer u.mu.Unlock()
			for _, c := range u.charges {
				if c.Key == in.IdempotencyKey {
					return nil, findOut{Found: true, ChargeID: c.ID}, nil
				}
			}
			return nil, findOut{}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "list_charges", Description: "How many charges there are."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, countOut, error) {
			u.mu.Lock()
			defer u.mu.Unlock()
			return nil, countOut{Count: len(u.charges)}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "delete_everything", Description: "Not in the registry: must not be served."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, countOut, error) {
			panic("an unregistered upstream tool was called")
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(func() {
		close(u.release)
		hs.Close()
	})
	u.url = hs.URL
	return u
}

// of returns the charges for an order.
func (u *upstream) of(order string) []charge {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []charge
	for _, c := range u.charges {
		if c.OrderID == order {
			out = append(out, c)
		}
	}
	return out
}
