package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
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
				require.Equal(t, i+1, b.count(t, `SELECT count(*) FROM outbox_batches WHERE $1 = ANY(subjects)`, "opledger.results."+sub.WorkflowID),
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

// A repeat's answer is handed to the relay ahead of the statement that
// records it, marked Ahead, while the inbox has no row for its event id
// yet; after the commit the same message (same msg id) is handed off again
// in its batch, so that it is sent even if the copy ahead is lost. The
// first intent's answer goes only after its commit, as every decision that
// creates something does. Both duplicate kinds (a new event id with a known
// key, a known event id) take the path.
//
// Breaking it: handing the answer off only after InboxRecordRepeat (as
// before) fails the first check: the inbox row is already there.
func TestRepeatAnswerIsHandedOffAheadOfItsRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.New(t)
	db, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	type handed struct {
		msgID, batch string
		ahead        bool
		// The answer's event id in the inbox, seen from another connection
		// at the hand-off: its rows and their redeliveries counted.
		inboxRows, dups int
	}
	var got []handed
	var eventID string
	var readErr error // the hand-off may run on a group statement's goroutine: checked by the test's
	st, err := store.Open(ctx, url, store.Options{MaxConns: 4, OnOutbox: func(due []store.Message) {
		for _, m := range due {
			h := handed{msgID: m.MsgID, batch: m.Batch, ahead: m.Ahead}
			if err := db.QueryRow(ctx, `SELECT count(*), coalesce(sum(duplicate_count), 0) FROM inbox WHERE event_id = $1`,
				eventID).Scan(&h.inboxRows, &h.dups); err != nil && readErr == nil {
				readErr = err
			}
			got = append(got, h)
		}
	}})
	require.NoError(t, err)
	t.Cleanup(st.Close)

	const key = "payment:order_9:capture:100:USD:v1"
	for i, evt := range []string{"evt_1", "evt_2", "evt_2"} {
		got, eventID = nil, evt
		sub := answering(submission(evt, newOp(key, "x")), i)
		res, err := st.Submit(ctx, sub)
		require.NoError(t, err)
		require.NoError(t, readErr)
		var answers []handed
		for _, h := range got {
			if !strings.HasPrefix(h.msgID, "dispatch:") {
				answers = append(answers, h)
			}
		}
		if i == 0 {
			require.Equal(t, op.DecisionNew, res.Decision)
			require.Len(t, answers, 1, "a new intent's answer is handed off once, after its commit")
			require.False(t, answers[0].ahead)
			require.Equal(t, 1, answers[0].inboxRows)
			continue
		}
		require.Len(t, answers, 2, "step %d (%s): ahead of the record, then with it", i, res.Decision)
		require.True(t, answers[0].ahead, "step %d: the first copy is the one ahead", i)
		require.Empty(t, answers[0].batch, "step %d: the copy ahead names no row to delete", i)
		require.False(t, answers[1].ahead)
		require.NotEmpty(t, answers[1].batch, "step %d: the committed copy names its batch", i)
		if i == 1 {
			require.Equal(t, op.DecisionDuplicateOperation, res.Decision)
			require.Equal(t, 0, answers[0].inboxRows, "handed off before the new event id's row is recorded")
		} else {
			require.Equal(t, op.DecisionDuplicateEvent, res.Decision)
			require.Equal(t, 0, answers[0].dups, "handed off before the redelivery is counted")
			require.Equal(t, 1, answers[1].dups)
		}
		require.Equal(t, 1, answers[1].inboxRows)
	}
	var batches int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM outbox_batches`).Scan(&batches))
	require.Equal(t, 3, batches, "every answer is still written with its decision")
}

// Two copies of one intent (the same new event id, a key the ledger knows)
// race: while copy A's answer is handed off ahead of its record, copy B is
// submitted whole and records duplicate_operation first. A's record then
// finds the event id known and the transaction answers A as a redelivery
// (duplicate_event). Both answers sent ahead carry the same msg id, made
// from the event id, so JetStream keeps one of them: the agent reads one
// duplicate_operation and one duplicate_event, as the ledger recorded.
//
// Breaking it: keeping the caller's msg ids (firstAnswers not applied)
// sends two duplicate_operation answers under two msg ids.
func TestRacingCopiesAnswerOnceAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.New(t)
	type handed struct {
		msgID, payload string
		ahead          bool
	}
	var got []handed
	var st *store.Store
	const key = "payment:order_11:capture:100:USD:v1"
	step := 0
	nested := false
	var nestedErr error
	var nestedRes *store.SubmitResult
	st, err := store.Open(ctx, url, store.Options{MaxConns: 4, OnOutbox: func(due []store.Message) {
		for _, m := range due {
			if strings.HasPrefix(m.MsgID, "dispatch:") {
				continue
			}
			got = append(got, handed{msgID: m.MsgID, payload: string(m.Payload), ahead: m.Ahead})
		}
		if step == 1 && !nested && len(due) > 0 && due[0].Ahead {
			// Copy A is between its answer ahead and its record: copy B
			// runs whole now.
			nested = true
			nestedRes, nestedErr = st.Submit(ctx, answering(submission("evt_2", newOp(key, "x")), 2))
		}
	}})
	require.NoError(t, err)
	t.Cleanup(st.Close)

	_, err = st.Submit(ctx, answering(submission("evt_1", newOp(key, "x")), 0))
	require.NoError(t, err)
	got, step = nil, 1
	resA, err := st.Submit(ctx, answering(submission("evt_2", newOp(key, "x")), 1))
	require.NoError(t, err)
	require.True(t, nested, "copy B ran while copy A's answer was ahead of its record")
	require.NoError(t, nestedErr)
	require.Equal(t, op.DecisionDuplicateOperation, nestedRes.Decision, "copy B recorded first")
	require.Equal(t, op.DecisionDuplicateEvent, resA.Decision, "copy A is then a redelivery")

	ids := map[string][]string{} // msg id → the decisions sent under it
	for _, h := range got {
		ids[h.msgID] = append(ids[h.msgID], strings.SplitN(h.payload, "|", 2)[0])
	}
	var firsts, redeliveries int
	for id, decisions := range ids {
		switch decisions[0] {
		case string(op.DecisionDuplicateOperation):
			firsts++
			require.Len(t, decisions, 3, "%s: A's copy ahead, B's copy ahead and B's committed copy share one msg id", id)
		case string(op.DecisionDuplicateEvent):
			redeliveries++
		}
		for _, d := range decisions {
			require.Equal(t, decisions[0], d, "%s: one msg id, one decision", id)
		}
	}
	require.Equal(t, 1, firsts, "one duplicate_operation answer as JetStream stores them: %v", ids)
	require.Equal(t, 1, redeliveries, "%v", ids)
}
