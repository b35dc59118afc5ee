package ingest_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Every refusal at the intent door is counted by a stable reason (the
// texts of refusals are for people and may change; dashboards and alerts
// read the reasons). A redelivered refusal is not counted again. Breaking
// it: a refusal counted under the wrong reason, or under none.
func TestRefusalsCountedByReason(t *testing.T) {
	t.Parallel()
	e := pipetest.Start(t, pipetest.Options{})
	reg := prometheus.NewRegistry()
	svc := ingest.New(ingest.Config{}, e.Store, e.Bus, e.Registry, telemetry.NewMetrics(reg), e.Log)
	intent := func(eventID, rest string) []byte {
		return []byte(`{"spec":"opledger.intent.v1","event_id":"` + eventID + `","workflow_id":"wf_r",` + rest + `}`)
	}
	capture := `"tool":"capture_payment","args":{"order_id":"o_r","customer_id":"c","amount_cents":4900,"currency":"USD"}`
	subj := wire.IntentSubject("wf_r")
	for _, c := range []struct {
		subject, msgID string
		body           []byte
		want           string
	}{
		{subj, "", []byte(strings.Repeat(" ", wire.MaxIntentLen+1)), wire.ReasonTooLarge},
		{subj, "", []byte("{\"spec\":\"x\xff\"}"), wire.ReasonInvalidUTF8},
		{subj, "", []byte(`{"spec":`), wire.ReasonNotJSON},
		{subj, "", []byte(`[1]`), wire.ReasonNotObject},
		{subj, "", []byte(`{} {}`), wire.ReasonNotOneObject},
		{subj, "", []byte(`{"spec":"a","spec":"b"}`), wire.ReasonDuplicateField},
		{subj, "", []byte(`{"Tool":"x"}`), wire.ReasonUnknownField},
		{subj, "", []byte(`{"spec":1}`), wire.ReasonWrongType},
		{subj, "", []byte(`{"spec":"opledger.intent.v2","event_id":"e_spec"}`), wire.ReasonBadSpec},
		{subj, "", intent("", capture), wire.ReasonBadEventID},
		{subj, "", []byte(`{"spec":"opledger.intent.v1","event_id":"e_wf","workflow_id":"a.b",` + capture + `}`), wire.ReasonBadWorkflowID},
		{subj, "", intent("e_tool", `"tool":"","args":{}`), wire.ReasonBadField},
		{subj, "", intent("e_args", `"tool":"capture_payment","args":[]`), wire.ReasonArgsNotObject},
		{wire.IntentSubject("wf_other"), "", intent("e_subj", capture), wire.ReasonSubjectMismatch},
		{subj, "e_other", intent("e_msgid", capture), wire.ReasonMsgIDMismatch},
		{subj, "", intent("e_unknown", `"tool":"no_such_tool","args":{}`), wire.ReasonUnknownTool},
		{subj, "", intent("e_badargs", `"tool":"capture_payment","args":{"order_id":"o"}`), wire.ReasonInvalidArgs},
		{subj, "", intent("e_ok", capture), ""},
		{subj, "", intent("e_conflict", `"tool":"capture_payment","args":{"order_id":"o_r","customer_id":"other","amount_cents":4900,"currency":"USD"}`), wire.ReasonConflict},
	} {
		ans, err := svc.Ingest(e.Ctx, c.subject, map[string]string{wire.HeaderMsgID: c.msgID}, c.body)
		require.NoError(t, err, c.want)
		if c.want == "" {
			require.Equal(t, op.DecisionNew, ans.Decision)
			continue
		}
		require.Contains(t, []op.Decision{op.DecisionRejected, op.DecisionConflict}, ans.Decision, "%s: %s", c.want, ans.Result.Reason)
		require.Equal(t, 1.0, refused(t, reg, c.want), "%s: %s", c.want, ans.Result.Reason)
	}
	// The same refused bytes again: answered, not counted again.
	_, err := svc.Ingest(e.Ctx, subj, nil, intent("e_unknown", `"tool":"no_such_tool","args":{}`))
	require.NoError(t, err)
	require.Equal(t, 1.0, refused(t, reg, wire.ReasonUnknownTool))
}

func refused(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "opledger_intents_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
