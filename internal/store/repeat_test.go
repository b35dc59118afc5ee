package store_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/pkg/op"
)

// answering adds an answer that names what was decided, as planner-ingest's
// does, so that the two paths' answers can be compared.
func answering(sub store.Submission, step int) store.Submission {
	sub.Answer = func(res *store.SubmitResult) []store.Message {
		opID := ""
		if res.Operation != nil {
			opID = res.Operation.ID
		}
		return []store.Message{{Subject: "opledger.results." + sub.WorkflowID, MsgID: fmt.Sprintf("result:%d", step),
			Payload: fmt.Appendf(nil, "%s|%s|%s|%s", res.Decision, res.FirstDecision, opID, res.Reason)}}
	}
	return sub
}

// A repeat of a simple intent is answered in two statements on the pool
// (Store.submitRepeat), not the transaction. It must decide, record and
// answer exactly as the transaction (Tx.Submit) does: each scenario runs
// once through Store.Submit and once through Tx.Submit on its own ledger,
// and the results, the inbox rows and the answers must be the same.
func TestRepeatDecidesAsTheTransaction(t *testing.T) {
	t.Parallel()
	const key = "payment:order_7:capture:100:USD:v1"
	type step struct {
		eventID, argsSeed, payload string
	}
	scenarios := map[string][]step{
		"same key, new event id":   {{"evt_1", "x", ""}, {"evt_2", "x", ""}},
		"same event id":            {{"evt_1", "x", ""}, {"evt_1", "x", ""}, {"evt_1", "x", ""}},
		"same event id, new bytes": {{"evt_1", "x", ""}, {"evt_1", "x", `{"tampered":true}`}},
		"same key, other args":     {{"evt_1", "x", ""}, {"evt_2", "other args", ""}},
		"a conflict sent again":    {{"evt_1", "x", ""}, {"evt_2", "other args", ""}, {"evt_2", "other args", ""}},
		"a duplicate sent again":   {{"evt_1", "x", ""}, {"evt_2", "x", ""}, {"evt_2", "x", ""}},
	}
	type outcome struct {
		results []string
		inbox   []string
		answers []string
	}
	run := func(t *testing.T, steps []step, viaTx bool) outcome {
		b := setup(t)
		var out outcome
		ids := map[string]string{} // operation id → its name in this run, for comparing runs
		// named replaces the operation ids in s by their names.
		named := func(s string) string {
			for id, n := range ids {
				s = strings.ReplaceAll(s, id, n)
			}
			return s
		}
		name := func(id string) string {
			if id == "" {
				return ""
			}
			if _, ok := ids[id]; !ok {
				ids[id] = fmt.Sprintf("op%d", len(ids)+1)
			}
			return ids[id]
		}
		for i, s := range steps {
			sub := answering(submission(s.eventID, newOp(key, s.argsSeed)), i)
			if s.payload != "" {
				sub.Payload = []byte(s.payload)
			}
			var res *store.SubmitResult
			var err error
			if viaTx && i > 0 {
				err = b.store.InTx(b.ctx, func(tx *store.Tx) error {
					res, err = tx.Submit(b.ctx, sub)
					return err
				})
			} else {
				res, err = b.store.Submit(b.ctx, sub)
			}
			require.NoError(t, err, "step %d", i)
			opID := ""
			if res.Operation != nil {
				opID = res.Operation.ID
				require.Equal(t, op.StatePendingDispatch, res.Operation.State)
			}
			out.results = append(out.results, fmt.Sprintf("%s first=%s %s %q", res.Decision, res.FirstDecision, name(opID), named(res.Reason)))
			if !viaTx && i > 0 {
				require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox_batches WHERE $1 = ANY(msg_ids)`, fmt.Sprintf("result:%d", i)),
					"step %d: a repeat's answer is written by the repeat path, in a row of outbox_batches", i)
			}
		}
		if !viaTx {
			require.Zero(t, store.RepeatLookups(b.store), "every repeat is decided on what OperationSubmitNew read")
		}
		rows, err := b.db.Query(b.ctx, `SELECT event_id, payload_hash, workflow_id, decision, reason, coalesce(operation_id, ''), duplicate_count, length(payload)
			FROM inbox ORDER BY event_id`)
		require.NoError(t, err)
		for rows.Next() {
			var ev, hash, wf, decision, reason, opID string
			var dups, payloadLen int
			require.NoError(t, rows.Scan(&ev, &hash, &wf, &decision, &reason, &opID, &dups, &payloadLen))
			out.inbox = append(out.inbox, fmt.Sprintf("%s %s %s %s %q %s dups=%d payload=%d", ev, hash, wf, decision, named(reason), name(opID), dups, payloadLen))
		}
		require.NoError(t, rows.Err())
		rows, err = b.db.Query(b.ctx, `SELECT msg_id, convert_from(payload, 'UTF8') FROM outbox_messages WHERE subject LIKE 'opledger.results.%' ORDER BY msg_id`)
		require.NoError(t, err)
		for rows.Next() {
			var msgID, payload string
			require.NoError(t, rows.Scan(&msgID, &payload))
			out.answers = append(out.answers, msgID+" "+named(payload))
		}
		require.NoError(t, rows.Err())
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM operations`))
		require.Equal(t, 2, b.count(t, `SELECT count(*) FROM operation_events`), "create + enqueue, nothing for a repeat")
		return out
	}
	for name, steps := range scenarios {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fast, tx := run(t, steps, false), run(t, steps, true)
			require.Equal(t, tx.results, fast.results)
			require.Equal(t, tx.inbox, fast.inbox)
			require.Equal(t, tx.answers, fast.answers)
		})
	}
}
