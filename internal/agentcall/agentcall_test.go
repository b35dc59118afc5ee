package agentcall

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/examples"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
)

func door(t *testing.T) *Door {
	t.Helper()
	reg, err := registry.Load(examples.Registry, registry.Options{Catalog: true})
	require.NoError(t, err)
	d, err := New(Config{Client: &client.Client{}, Registry: reg})
	require.NoError(t, err)
	return d
}

const capture = `{"order_id":"o_1","customer_id":"c","amount_cents":4900,"currency":"USD"}`

func TestEventIDs(t *testing.T) {
	t.Parallel()
	d := door(t)
	prep := func(c Call) string {
		t.Helper()
		if c.Tool == "" {
			c.Tool = "capture_payment"
		}
		if c.Args == nil {
			c.Args = json.RawMessage(capture)
		}
		c.WorkflowID = "wf"
		in, _, err := d.Prepare(c)
		require.NoError(t, err)
		return in.EventID
	}
	require.Equal(t, "mcp:conv_1:call_1", prep(Call{ConversationID: "conv_1", ToolCallID: "call_1"}))
	require.Equal(t, "mcp:wf:call_1", prep(Call{ToolCallID: "call_1"}), "the workflow scopes a call without a conversation")
	// Escaping keeps pairs apart that plain joining would merge.
	a := prep(Call{ConversationID: "a:b", ToolCallID: "c"})
	b := prep(Call{ConversationID: "a", ToolCallID: "b:c"})
	require.NotEqual(t, a, b)
	require.Equal(t, "mcp:a%3Ab:c", a)
	require.Equal(t, "mcp:100%25:x", prep(Call{ConversationID: "100%", ToolCallID: "x"}))

	// Without a tool-call id: derived from the business identity.
	x := prep(Call{ConversationID: "conv_1"})
	y := prep(Call{ConversationID: "conv_1", Args: json.RawMessage(`{"currency":"usd","amount_cents":4900,"customer_id":"c","order_id":" o_1"}`)})
	require.Equal(t, x, y, "the same canonical arguments, the same event")
	require.True(t, strings.HasPrefix(x, "mcp:conv_1:auto:"))
	require.NotEqual(t, x, prep(Call{ConversationID: "conv_2"}), "per conversation")
	require.NotEqual(t, x, prep(Call{ConversationID: "conv_1", Args: json.RawMessage(strings.Replace(capture, "4900", "4901", 1))}))

	// A tool whose key counts the entity's versions: a fresh id per call.
	crm := `{"record_id":"r_1","field":"status","value":"active"}`
	c1 := prep(Call{Tool: "update_crm_record", Args: json.RawMessage(crm), ConversationID: "conv_1"})
	c2 := prep(Call{Tool: "update_crm_record", Args: json.RawMessage(crm), ConversationID: "conv_1"})
	require.NotEqual(t, c1, c2, "a set-back must not collapse onto the first call")

	long := strings.Repeat("x", 128)
	id := prep(Call{ConversationID: long, ToolCallID: strings.Repeat("%", 100)})
	require.LessOrEqual(t, len(id), 200)
	require.True(t, strings.HasPrefix(id, "mcp:h:"))
}

func TestPrepareRefuses(t *testing.T) {
	t.Parallel()
	d := door(t)
	for name, c := range map[string]Call{
		"control character in the call id": {ToolCallID: "call\x00", WorkflowID: "wf", Tool: "capture_payment", Args: json.RawMessage(capture)},
		"call id too long":                 {ToolCallID: strings.Repeat("a", 129), WorkflowID: "wf", Tool: "capture_payment", Args: json.RawMessage(capture)},
		"unknown tool":                     {WorkflowID: "wf", Tool: "nope", Args: json.RawMessage(`{}`)},
		"bad arguments":                    {WorkflowID: "wf", Tool: "capture_payment", Args: json.RawMessage(`{"order_id":1}`)},
		"repeated key":                     {WorkflowID: "wf", Tool: "capture_payment", Args: json.RawMessage(`{"order_id":"a","order_id":"b","customer_id":"c","amount_cents":1,"currency":"USD"}`)},
		"bad workflow":                     {WorkflowID: "wf.x", Tool: "capture_payment", Args: json.RawMessage(capture)},
	} {
		_, _, err := d.Prepare(c)
		var inv *InvalidError
		require.ErrorAs(t, err, &inv, name)
		require.ErrorIs(t, err, op.ErrInvalid, name)
	}
}
