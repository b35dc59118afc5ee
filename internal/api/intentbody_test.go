package api

import (
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/schema"
)

// The intent's fields as the API classifies refusals are the wire
// schema's, so a field added to the protocol is never called unknown here.
func TestIntentFieldsAreTheSchemas(t *testing.T) {
	t.Parallel()
	data, err := schema.Wire.ReadFile("wire/intent.v1.json")
	require.NoError(t, err)
	var s struct {
		Properties map[string]struct {
			Properties map[string]any `json:"properties"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(data, &s))
	var names []string
	for name, p := range s.Properties {
		names = append(names, name)
		sub, nested := intentNested[name]
		if p.Properties == nil {
			require.False(t, nested && sub != nil, "%s has no fixed fields", name)
			continue
		}
		require.True(t, nested, "%s is an object with fields", name)
		var want []string
		for k := range p.Properties {
			want = append(want, k)
		}
		sort.Strings(want)
		got := slices.Clone(sub)
		sort.Strings(got)
		require.Equal(t, want, got, name)
	}
	sort.Strings(names)
	got := slices.Clone(intentFields)
	sort.Strings(got)
	require.Equal(t, names, got)
	require.Contains(t, intentNested, "correlation")
}

// reasonWords are what pkg/wire's refusal says for each reason: the
// classification names the cause the message names.
var reasonWords = map[string]string{
	ReasonInvalidUTF8:    "UTF",
	ReasonNotJSON:        "not valid JSON",
	ReasonNotObject:      "object",
	ReasonNotOneObject:   "data after the JSON object",
	ReasonDuplicateField: "appears twice",
	ReasonUnknownField:   "unknown field",
	ReasonTooLarge:       "larger than",
}

// checkIntentBody holds for any body: it is accepted whole or refused with
// a stable reason that says what the refusal says; an accepted intent
// survives encoding and reading again unchanged.
func checkIntentBody(t *testing.T, body []byte) {
	in, err := DecodeIntentBody(body)
	if err != nil {
		require.Nil(t, in)
		reason := IntentBodyReason(err)
		require.NotEmpty(t, reason, "%v", err)
		if reason == ReasonTooLarge {
			require.ErrorIs(t, err, errTooLarge)
		} else {
			require.ErrorIs(t, err, op.ErrInvalid)
		}
		if words, ok := reasonWords[reason]; ok {
			require.Contains(t, err.Error(), words, "reason %s", reason)
		} else {
			require.Equal(t, ReasonInvalidIntent, reason, "%v", err)
			for r, words := range reasonWords {
				if r != ReasonNotObject {
					require.NotContains(t, err.Error(), words, "%v is %s, not %s", err, r, reason)
				}
			}
		}
		return
	}
	again, err := json.Marshal(in)
	require.NoError(t, err)
	back, err := DecodeIntentBody(again)
	require.NoError(t, err, "%s", again)
	require.Equal(t, in.EventID, back.EventID)
	require.Equal(t, in.WorkflowID, back.WorkflowID)
	require.Equal(t, in.Tool, back.Tool)
	require.Equal(t, in.Correlation, back.Correlation)
	require.JSONEq(t, string(in.Args), string(back.Args))
}

const goodIntent = `{"spec":"opledger.intent.v1","event_id":"conv_1:call_1","workflow_id":"wf_1","tool":"capture_payment",` +
	`"args":{"order_id":"o_1","customer_id":"c","amount_cents":4900,"currency":"USD"},"actor":{"type":"agent","id":"bot"},` +
	`"correlation":{"conversation_id":"conv_1"},"dedupe_override":{"reason":"again"}}`

func TestIntentBodyReasons(t *testing.T) {
	t.Parallel()
	in, err := DecodeIntentBody([]byte(goodIntent))
	require.NoError(t, err)
	require.Equal(t, "conv_1:call_1", in.EventID)
	for body, want := range map[string]string{
		strings.Replace(goodIntent, `"tool"`, `"tool":"x","tool"`, 1):                          ReasonDuplicateField,
		strings.Replace(goodIntent, `"o_1"`, `"o_1","order_id":"o_2"`, 1):                      ReasonDuplicateField,
		strings.Replace(goodIntent, `"id":"bot"`, `"id":"bot","id":"root"`, 1):                 ReasonDuplicateField,
		strings.Replace(goodIntent, `"conv_1"}`, `"conv_1","conversation_id":"x"}`, 1):         ReasonDuplicateField,
		strings.Replace(goodIntent, `"tool"`, `"TOOL"`, 1):                                     ReasonUnknownField,
		strings.Replace(goodIntent, `"id":"bot"`, `"id":"bot","role":"admin"`, 1):              ReasonUnknownField,
		strings.Replace(goodIntent, `"reason":"again"`, `"why":"again"`, 1):                    ReasonUnknownField,
		strings.Replace(goodIntent, `"o_1"`, "\"o_\xc3\"", 1):                                  ReasonInvalidUTF8,
		strings.Replace(goodIntent, `"o_1"`, `"o_\udfff"`, 1):                                  ReasonInvalidUTF8,
		strings.Replace(goodIntent, `"o_1"`, `"o_\ud83d\u0041"`, 1):                            ReasonInvalidUTF8,
		strings.Replace(goodIntent, `"actor":{"type":"agent","id":"bot"}`, `"actor":"bot"`, 1): ReasonNotObject,
		goodIntent + ` {}`: ReasonNotOneObject,
		goodIntent[:40]:    ReasonNotJSON,
		`null`:             ReasonNotObject,
		strings.Replace(goodIntent, `"opledger.intent.v1"`, `"opledger.intent.v2"`, 1):                                                        ReasonInvalidIntent,
		strings.Replace(goodIntent, `"args":{`, `"args":[],"x":{`, 1):                                                                         ReasonUnknownField,
		strings.Replace(goodIntent, `"wf_1"`, `"wf.1"`, 1):                                                                                    ReasonInvalidIntent,
		strings.Replace(goodIntent, `"conv_1:call_1"`, `"conv\u0000"`, 1):                                                                     ReasonInvalidIntent,
		`{"spec":"opledger.intent.v1","event_id":"e","workflow_id":"w","tool":"t","args":{"a":"` + strings.Repeat("x", maxIntentBody) + `"}}`: ReasonTooLarge,
	} {
		_, err := DecodeIntentBody([]byte(body))
		require.Error(t, err, body)
		require.Equal(t, want, IntentBodyReason(err), "%.120s: %v", body, err)
		checkIntentBody(t, []byte(body))
	}
	require.Empty(t, IntentBodyReason(errors.New("other")))
}

// FuzzDecodeIntentBody: whatever the body, the decoder answers one way
// with a reason that names the cause (checkIntentBody), and never panics.
func FuzzDecodeIntentBody(f *testing.F) {
	f.Add([]byte(goodIntent))
	f.Add([]byte(`{"spec":"opledger.intent.v1","event_id":"e","workflow_id":"w","tool":"t","args":{}}`))
	f.Add([]byte(strings.Replace(goodIntent, `"tool"`, `"tool":"x","tool"`, 1)))
	f.Add([]byte(strings.Replace(goodIntent, `"o_1"`, `"o_\ud800"`, 1)))
	f.Add([]byte(strings.Replace(goodIntent, `"o_1"`, "\"o_\xff\"", 1)))
	f.Add([]byte(goodIntent + "{}"))
	f.Add([]byte(`{"args":{"a":[{"b":1,"b":2}]}}`))
	f.Add([]byte(`{"correlation":{"a":"b","a":"c"}}`))
	f.Add([]byte(`[`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, body []byte) {
		checkIntentBody(t, body)
	})
}
