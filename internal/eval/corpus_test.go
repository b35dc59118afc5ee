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
	require.Len(t, lanes, len(allTools))
	// The key an action gets when accepted: a set-back step's is scoped by
	// the record's version, one more per step.
	keyOf := func(a *action, p *registry.Prepared) string {
		if p.EntityVersion == nil {
			return p.Operation.IdempotencyKey
		}
		k, err := p.EntityVersion.Key(int64(a.step + 1))
		require.NoError(t, err)
		return k
	}
	keys := map[string]string{} // key → action id
	events := map[string]string{}
	perScenario := map[string]int{}
	near := 0
	for ti, lane := range lanes {
		for _, p := range lane {
			require.Equal(t, allTools[ti], p.tool, "a lane is one tool, so that its faults hit only its phases")
			for _, a := range p.actions {
				perScenario[a.scenario]++
				require.Equal(t, MsgOriginal, a.msgs[0].kind)
				require.Zero(t, a.msgs[0].delay)
				orig := prepare(a, a.msgs[0])
				require.Equal(t, "enqueue", string(orig.Initial), "%s needs no approval", a.id)
				key := keyOf(a, orig)
				require.NotContains(t, keys, key, "%s shares a key with %s", a.id, keys[key])
				keys[key] = a.id
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
						require.Equal(t, key, keyOf(a, p), "%s: %s", a.id, m.args)
						require.Equal(t, orig.Operation.ArgsHash, p.Operation.ArgsHash, "%s: %s", a.id, m.args)
					case MsgReplanLookAlike:
						p := prepare(a, m)
						require.NotEqual(t, string(a.msgs[0].args), string(m.args))
						require.Equal(t, key, keyOf(a, p), "look-alikes are one action: %s", m.args)
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
	// Set-back sequences: active, suspended, active on one record, the
	// third step a key of its own although its arguments equal the first's.
	sb := lanes[len(tools)][0]
	require.Equal(t, ScenarioSetBack, sb.scenario)
	first, third := sb.actions[0], sb.actions[2]
	require.Equal(t, first.entity, third.entity)
	require.Equal(t, string(first.msgs[0].args), string(third.msgs[0].args))
	require.Equal(t, []string{"active", "suspended", "active"}, []string{first.value, sb.actions[1].value, third.value})
}
