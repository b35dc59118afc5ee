package eval

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/pkg/registry"
)

// TestCorpusMeansWhatItSays checks the corpus against the example registry
// without running anything: a re-plan canonicalizes to its action's key and
// arguments, a near-duplicate gets a key of its own, a redelivery carries
// the same bytes, nothing needs approval, and a look-alike re-plan
// (invisible characters, an address in other cases) is the same action.
func TestCorpusMeansWhatItSays(t *testing.T) {
	t.Parallel()
	vendorURLs := map[string]string{}
	for _, v := range app.VendorNames {
		vendorURLs[v] = "http://127.0.0.1:1"
	}
	reg, err := app.LoadRegistry(app.RegistryConfig{Vendors: vendorURLs})
	require.NoError(t, err)
	prepare := func(a *action, m message) *registry.Prepared {
		tool, err := reg.Tool(a.tool.name)
		require.NoError(t, err)
		p, err := tool.Prepare(registry.Proposal{WorkflowID: a.workflow, Args: m.args})
		require.NoError(t, err, "%s %s: %s", a.id, m.kind, m.args)
		return p
	}

	const n = 40
	lanes := buildCorpus("run1", AllScenarios, n, 3)
	require.Equal(t, lanes, buildCorpus("run1", AllScenarios, n, 3), "the same seed gives the same corpus")
	require.Len(t, lanes, len(tools))
	keys := map[string]string{} // key → action id
	events := map[string]string{}
	perScenario := map[string]int{}
	near := 0
	for ti, lane := range lanes {
		for _, p := range lane {
			require.Equal(t, tools[ti], p.tool, "a lane is one tool, so that its faults hit only its phases")
			for _, a := range p.actions {
				perScenario[a.scenario]++
				require.Equal(t, MsgOriginal, a.msgs[0].kind)
				require.Zero(t, a.msgs[0].delay)
				orig := prepare(a, a.msgs[0])
				require.Equal(t, "enqueue", string(orig.Initial), "%s needs no approval", a.id)
				require.NotContains(t, keys, orig.Operation.IdempotencyKey, "%s shares a key with %s", a.id, keys[orig.Operation.IdempotencyKey])
				keys[orig.Operation.IdempotencyKey] = a.id
				if a.near {
					near++
				}
				for _, m := range a.msgs[1:] {
					if prev, ok := events[m.eventID]; ok {
						require.Equal(t, a.id, prev, "event ids belong to one action")
					}
					switch m.kind {
					case MsgRedeliveryMsgID, MsgRedeliveryNoMsgID:
						require.Equal(t, a.msgs[0].eventID, m.eventID)
						require.Equal(t, a.msgs[0].args, m.args, "a redelivery carries the same bytes")
					case MsgReplan:
						require.NotEqual(t, a.msgs[0].eventID, m.eventID)
						p := prepare(a, m)
						require.Equal(t, orig.Operation.IdempotencyKey, p.Operation.IdempotencyKey, "%s: %s", a.id, m.args)
						require.Equal(t, orig.Operation.ArgsHash, p.Operation.ArgsHash, "%s: %s", a.id, m.args)
					case MsgReplanLookAlike:
						p := prepare(a, m)
						require.NotEqual(t, string(a.msgs[0].args), string(m.args))
						require.Equal(t, orig.Operation.IdempotencyKey, p.Operation.IdempotencyKey, "look-alikes are one action: %s", m.args)
						require.Equal(t, orig.Operation.ArgsHash, p.Operation.ArgsHash, "look-alikes have one canonical form: %s", m.args)
					default:
						t.Fatalf("unexpected message kind %q", m.kind)
					}
				}
				for _, m := range a.msgs {
					events[m.eventID] = a.id
				}
			}
		}
	}
	for _, s := range AllScenarios {
		require.Equal(t, n, perScenario[s], s)
	}
	// 14, 13 and 13 actions per tool: every fourth is a near-duplicate.
	require.Equal(t, 3+3+3, near)
}
