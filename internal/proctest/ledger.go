package proctest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
)

// Settled reports whether an operation is where the promise says every
// operation ends: done (completed_*, failed_permanent, rejected, cancelled,
// compensated) or with a person (escalated, awaiting_approval).
func Settled(s op.State) bool {
	switch s {
	case op.StateCompletedSuccess, op.StateCompletedNoop, op.StateFailedPermanent, op.StateRejected,
		op.StateCancelled, op.StateCompensated, op.StateEscalated, op.StateAwaitingApproval:
		return true
	}
	return false
}

// lastWord reports whether a result is the last one its operation gets
// without someone acting: final, or waiting for a person.
func lastWord(status string) bool {
	s := op.State(status)
	return s.Terminal() || s == op.StateEscalated || s == op.StateAwaitingApproval
}

// Operations returns every operation in the ledger, oldest first.
func (s *System) Operations() []*op.Operation {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := s.DB.Query(ctx, `SELECT id FROM operations ORDER BY created_at, id`)
	if err != nil {
		s.t.Fatalf("proctest: list operations: %v", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			s.t.Fatalf("proctest: list operations: %v", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		s.t.Fatalf("proctest: list operations: %v", err)
	}
	ops := make([]*op.Operation, 0, len(ids))
	for _, id := range ids {
		o, err := s.Store.Operation(ctx, id)
		if err != nil {
			s.t.Fatalf("proctest: operation %s: %v", id, err)
		}
		ops = append(ops, o)
	}
	return ops
}

// CountStates counts operations in the given states.
func (s *System) CountStates(states ...op.State) int {
	s.t.Helper()
	var names []string
	for _, st := range states {
		names = append(names, string(st))
	}
	return s.Count(`SELECT count(*) FROM operations WHERE state = ANY($1)`, names)
}

// Progress is what is still missing for the promise to hold.
type Progress struct {
	Unanswered []string        // accepted event ids without any result carrying them
	Unsettled  []*op.Operation // operations not Settled in the ledger
	NoLastWord []*op.Operation // settled operations whose final result has not reached the agent
	Unsent     int             // outbox rows not yet published (nor parked)
	Parked     int             // outbox rows NATS refused for good
}

// Done reports whether nothing is missing.
func (p Progress) Done() bool {
	return len(p.Unanswered) == 0 && len(p.Unsettled) == 0 && len(p.NoLastWord) == 0 && p.Unsent == 0 && p.Parked == 0
}

func (p Progress) String() string {
	var ids []string
	for _, o := range p.Unsettled {
		ids = append(ids, o.ID+"="+string(o.State))
	}
	var nolast []string
	for _, o := range p.NoLastWord {
		nolast = append(nolast, o.ID+"="+string(o.State))
	}
	return fmt.Sprintf("%d unanswered %v; %d unsettled %v; %d without their last result at the agent %v; %d outbox rows unsent, %d parked",
		len(p.Unanswered), p.Unanswered, len(p.Unsettled), ids, len(p.NoLastWord), nolast, p.Unsent, p.Parked)
}

// Check looks once at what is missing.
func (s *System) Check() Progress {
	s.t.Helper()
	var p Progress
	for _, id := range s.Accepted() {
		if len(s.results.answers(id)) == 0 {
			p.Unanswered = append(p.Unanswered, id)
		}
	}
	for _, o := range s.Operations() {
		if !Settled(o.State) {
			p.Unsettled = append(p.Unsettled, o)
			continue
		}
		r, ok := s.results.latest(o.ID)
		if !ok || r.Version < o.Version || r.Status != string(o.State) || !lastWord(r.Status) {
			p.NoLastWord = append(p.NoLastWord, o)
		}
	}
	p.Unsent = s.Count(`SELECT count(*) FROM outbox_messages WHERE sent_at IS NULL AND parked_at IS NULL`)
	p.Parked = s.Count(`SELECT count(*) FROM outbox WHERE parked_at IS NOT NULL`)
	return p
}

// WaitSettled waits up to timeout for the promise to hold: every accepted
// intent answered, every operation settled in the ledger with its last
// result at the agent, and the outbox drained with nothing parked. On
// timeout (or a parked row) it fails the test with a report of what is
// missing and the history of every operation concerned. It returns the
// operations and how long the wait took.
func (s *System) WaitSettled(timeout time.Duration) ([]*op.Operation, time.Duration) {
	s.t.Helper()
	began := time.Now()
	deadline := began.Add(timeout)
	nextLog := began.Add(15 * time.Second)
	for {
		p := s.Check()
		if p.Done() {
			s.CheckReferences()
			return s.Operations(), time.Since(began)
		}
		if time.Now().After(nextLog) {
			// A long wait says what it waits for, so that a slow recovery
			// can be told from a stuck one in the test's log.
			s.t.Logf("proctest: still waiting after %s: %s", time.Since(began).Round(time.Second), p)
			nextLog = nextLog.Add(15 * time.Second)
		}
		if p.Parked > 0 || time.Now().After(deadline) {
			s.t.Fatalf("proctest: the promise does not hold after %s: %s\n%s", time.Since(began).Round(time.Millisecond), p, s.Report(p))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// orphansSQL counts the rows of the tables every operation writes that
// name an operation the ledger does not have. Those tables have no foreign
// key to operations (migration 0020: the checks cost more than they could
// find), so this is where a statement that wrote one would show.
const orphansSQL = `SELECT
	(SELECT count(*) FROM operation_events e WHERE NOT EXISTS (SELECT 1 FROM operations o WHERE o.id = e.operation_id)) +
	(SELECT count(*) FROM attempts a WHERE NOT EXISTS (SELECT 1 FROM operations o WHERE o.id = a.operation_id)) +
	(SELECT count(*) FROM outbox_messages b WHERE b.operation_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.id = b.operation_id)) +
	(SELECT count(*) FROM inbox i WHERE i.operation_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.id = i.operation_id)) +
	(SELECT count(*) FROM entity_leases l WHERE NOT EXISTS (SELECT 1 FROM operations o WHERE o.id = l.operation_id))`

// CheckReferences fails the test when an event, attempt, outbox row, inbox
// row or entity lease names an operation the ledger does not have.
// WaitSettled calls it once the promise holds.
func (s *System) CheckReferences() {
	s.t.Helper()
	if n := s.Count(orphansSQL); n > 0 {
		s.t.Errorf("proctest: %d rows name an operation the ledger does not have", n)
	}
}

// Report describes the operations a Progress names, with their events,
// attempts and outbox rows, the vendor's counts and the parked rows.
func (s *System) Report(p Progress) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, o := range slices.Concat(p.Unsettled, p.NoLastWord) {
		if seen[o.ID] {
			continue
		}
		seen[o.ID] = true
		b.WriteString(s.History(o.ID))
		if r, ok := s.results.latest(o.ID); ok {
			fmt.Fprintf(&b, "  newest result at the agent: status=%s version=%d final=%v\n", r.Status, r.Version, r.Final)
		} else {
			b.WriteString("  no result at the agent\n")
		}
	}
	for _, id := range p.Unanswered {
		fmt.Fprintf(&b, "unanswered intent %s: %s\n", id, s.inboxRow(id))
	}
	if p.Parked > 0 {
		b.WriteString(s.OutboxRows(`parked_at IS NOT NULL`))
	}
	fmt.Fprintf(&b, "vendor stats: %+v\n", s.Vendors.Stats())
	return b.String()
}

// History is an operation's row, events, attempts and outbox rows, for
// failure messages.
func (s *System) History(id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b strings.Builder
	o, err := s.Store.Operation(ctx, id)
	if err != nil {
		return fmt.Sprintf("operation %s: %v\n", id, err)
	}
	fmt.Fprintf(&b, "operation %s %s key=%s state=%s version=%d epoch=%d attempts=%d origin=%s last_error=%q/%q\n",
		o.ID, o.Tool, o.IdempotencyKey, o.State, o.Version, o.LeaseEpoch, o.AttemptCount, o.OriginEventID, o.LastErrorCategory, o.LastError)
	evs, err := s.Store.Events(ctx, id)
	if err != nil {
		fmt.Fprintf(&b, "  events: %v\n", err)
	}
	for _, e := range evs {
		fmt.Fprintf(&b, "  event %d %s %s -> %s epoch=%d attempt=%s actor=%s at=%s detail=%s\n",
			e.Seq, e.Event, e.From, e.To, e.LeaseEpoch, e.AttemptID, e.Actor, e.At.Format("15:04:05.000"), e.Detail)
	}
	atts, err := s.Store.Attempts(ctx, id)
	if err != nil {
		fmt.Fprintf(&b, "  attempts: %v\n", err)
	}
	for _, a := range atts {
		fmt.Fprintf(&b, "  attempt %d %s worker=%s epoch=%d started=%s deadline=%s finished=%s outcome=%s category=%s http=%d error=%q\n",
			a.Number, a.ID, a.Worker, a.LeaseEpoch, a.StartedAt.Format("15:04:05.000"), a.DeadlineAt.Format("15:04:05.000"),
			a.FinishedAt.Format("15:04:05.000"), a.Outcome, a.ErrorCategory, a.HTTPStatus, a.Error)
	}
	b.WriteString(s.OutboxRows(`operation_id = '` + strings.ReplaceAll(id, "'", "''") + `'`))
	return b.String()
}

// OutboxRows describes the outbox messages (outbox_messages: rows and
// batches) matching a SQL condition, e.g. "sent_at IS NULL", for failure
// messages.
func (s *System) OutboxRows(where string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := s.DB.Query(ctx, `SELECT seq, subject, msg_id, publish_count, publish_failures, sent_at IS NOT NULL, parked_at IS NOT NULL,
		claimed_by, last_error, available_at FROM outbox_messages WHERE `+where+` ORDER BY seq, ord`)
	if err != nil {
		return fmt.Sprintf("  outbox: %v\n", err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var (
			id                int64
			subject, msgID    string
			count, failures   int
			sent, parked      bool
			claimedBy, errTxt string
			available         time.Time
		)
		if err := rows.Scan(&id, &subject, &msgID, &count, &failures, &sent, &parked, &claimedBy, &errTxt, &available); err != nil {
			return fmt.Sprintf("  outbox: %v\n", err)
		}
		fmt.Fprintf(&b, "  outbox %d %s %s publish_count=%d failures=%d sent=%v parked=%v claimed_by=%s available=%s last_error=%q\n",
			id, subject, msgID, count, failures, sent, parked, claimedBy, available.Format("15:04:05.000"), errTxt)
	}
	return b.String()
}

func (s *System) inboxRow(eventID string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var decision, opID, reason string
	err := s.DB.QueryRow(ctx, `SELECT decision, coalesce(operation_id, ''), reason FROM inbox WHERE event_id = $1 LIMIT 1`, eventID).
		Scan(&decision, &opID, &reason)
	if err != nil {
		return "no inbox row (" + err.Error() + ")"
	}
	return fmt.Sprintf("inbox decision=%s operation=%s reason=%q", decision, opID, reason)
}

// CheckOutbox fails the test if an outbox row is parked or was claimed for
// publishing more than maxPublishes times (a row republished endlessly).
func (s *System) CheckOutbox(maxPublishes int) {
	s.t.Helper()
	if n := s.Count(`SELECT count(*) FROM outbox WHERE parked_at IS NOT NULL`); n > 0 {
		s.t.Errorf("proctest: %d outbox rows parked:\n%s", n, s.OutboxRows(`parked_at IS NOT NULL`))
	}
	if n := s.Count(`SELECT coalesce(max(publish_count), 0) FROM outbox_messages`); n > maxPublishes {
		s.t.Errorf("proctest: an outbox row was published %d times (at most %d expected):\n%s", n, maxPublishes,
			s.OutboxRows(fmt.Sprintf(`publish_count > %d`, maxPublishes)))
	}
}

// Effects is what the vendor really did, by operation.
type Effects struct {
	// Captures and Emails count effects per idempotency key (the vendor's
	// Idempotency-Key, and X-Client-Reference for emails).
	Captures, Emails map[string]int
	// ByOrder and ByMailbox count them per order and per mailbox.
	ByOrder, ByMailbox map[string]int
}

// CheckEffects compares the vendor's counts with the ledger and fails the
// test for any side effect performed twice: per key, per order (captures)
// and per mailbox (emails), more than the ledger has operations for; an
// effect the ledger has no operation for; an operation completed without its
// effect or failed with one; or an effect the vendor received without a key.
func (s *System) CheckEffects(ops []*op.Operation) Effects {
	s.t.Helper()
	e := Effects{
		Captures:  s.Vendors.EffectsByKey(vendors.KindCapture),
		Emails:    s.Vendors.EffectsByKey(vendors.KindEmail),
		ByOrder:   s.Vendors.EffectsBy(vendors.KindCapture, vendors.AttrOrderID),
		ByMailbox: s.Vendors.EffectsBy(vendors.KindEmail, vendors.AttrMailbox),
	}
	if st := s.Vendors.Stats(); st.Unkeyed > 0 {
		s.t.Errorf("proctest: the vendor performed %d effects without an idempotency key", st.Unkeyed)
	}
	keys := map[string]*op.Operation{}
	orders, mailboxes := map[string]int{}, map[string]int{}
	for _, o := range ops {
		var effects map[string]int
		switch o.Tool {
		case "capture_payment":
			effects = e.Captures
			var a struct {
				OrderID string `json:"order_id"`
			}
			_ = json.Unmarshal(o.Args, &a)
			orders[a.OrderID]++
		case "send_email":
			effects = e.Emails
			var a struct {
				To string `json:"to"`
			}
			_ = json.Unmarshal(o.Args, &a)
			mailboxes[mailbox(a.To)]++
		default:
			continue
		}
		keys[o.IdempotencyKey] = o
		n := effects[o.IdempotencyKey]
		switch {
		case n > 1:
			s.t.Errorf("proctest: DUPLICATE: %s performed %d times at the vendor\n%s", o.IdempotencyKey, n, s.History(o.ID))
		case o.State == op.StateCompletedSuccess && n != 1:
			s.t.Errorf("proctest: operation %s completed_success but the vendor performed it %d times\n%s", o.ID, n, s.History(o.ID))
		case (o.State == op.StateFailedPermanent || o.State == op.StateRejected || o.State == op.StateAwaitingApproval) && n != 0:
			s.t.Errorf("proctest: operation %s is %s but the vendor performed it %d times\n%s", o.ID, o.State, n, s.History(o.ID))
		}
	}
	for kind, m := range map[string]map[string]int{"capture": e.Captures, "email": e.Emails} {
		for k, n := range m {
			if keys[k] == nil {
				s.t.Errorf("proctest: the vendor performed %s %q %d times, and the ledger has no operation with that key", kind, k, n)
			}
		}
	}
	for order, n := range e.ByOrder {
		if n > orders[order] {
			s.t.Errorf("proctest: DUPLICATE: order %s captured %d times at the vendor; the ledger has %d capture operations for it", order, n, orders[order])
		}
	}
	for mb, n := range e.ByMailbox {
		if n > mailboxes[mb] {
			s.t.Errorf("proctest: DUPLICATE: mailbox %s got %d emails; the ledger has %d email operations for it", mb, n, mailboxes[mb])
		}
	}
	return e
}

// mailbox is the address an email reaches, as vendors.AttrMailbox counts it.
func mailbox(to string) string {
	if i := strings.LastIndexByte(to, '<'); i >= 0 {
		if j := strings.IndexByte(to[i:], '>'); j > 0 {
			to = to[i+1 : i+j]
		}
	}
	return strings.ToLower(strings.TrimSpace(to))
}

// StateCounts summarises operations by state, e.g. "completed_success=14
// escalated=1", for logs.
func StateCounts(ops []*op.Operation) string {
	n := map[op.State]int{}
	for _, o := range ops {
		n[o.State]++
	}
	var parts []string
	for st, k := range n {
		parts = append(parts, fmt.Sprintf("%s=%d", st, k))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}
