package eval

import (
	"strings"
	"sync"
	"time"

	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// tracker follows the run from the agent's side: what was published, which
// event ids got an answer, and which operations reached a settled result.
// It drives progress and the waits; the KPIs are read from the ledger.
type tracker struct {
	mu        sync.Mutex
	byEvent   map[string]*action // every event id of the corpus
	messages  int                // messages to publish
	published int
	jsDup     int
	stored    map[string]int // event id → publishes JetStream stored
	dropped   map[string]bool
	firstPub  map[*action]time.Time
	answered  map[string]bool
	opAction  map[string][]*action // operations the results linked to actions
	opVersion map[string]int64
	opSettled map[string]time.Time // when a settling result arrived
	actionOps map[*action]map[string]bool
}

func newTracker(lanes [][]*phase) *tracker {
	t := &tracker{byEvent: map[string]*action{}, stored: map[string]int{}, dropped: map[string]bool{}, firstPub: map[*action]time.Time{}, answered: map[string]bool{},
		opAction: map[string][]*action{}, opVersion: map[string]int64{}, opSettled: map[string]time.Time{},
		actionOps: map[*action]map[string]bool{}}
	for _, lane := range lanes {
		for _, p := range lane {
			for _, a := range p.actions {
				for _, m := range a.msgs {
					t.byEvent[m.eventID] = a
				}
				t.messages += len(a.msgs)
			}
		}
	}
	return t
}

// sent records a publish of m that started at at; dup is JetStream's
// verdict on it.
func (t *tracker) sent(a *action, m message, at time.Time, dup bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.published++
	if dup {
		t.jsDup++
		t.dropped[m.eventID] = true
	} else {
		t.stored[m.eventID]++
	}
	if _, ok := t.firstPub[a]; m.kind == MsgOriginal && !ok {
		t.firstPub[a] = at
	}
}

// resent returns the event ids JetStream stored more than once, with how
// many times: the ledger must have seen each of them that often.
func (t *tracker) resent() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int{}
	for id, n := range t.stored {
		if n > 1 {
			out[id] = n
		}
	}
	return out
}

// result takes one result from the RESULTS stream.
func (t *tracker) result(r wire.Result, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.byEvent[r.EventID]
	if a == nil {
		return // another agent's, or a compensation's
	}
	t.answered[r.EventID] = true
	if r.OperationID != "" {
		ops := t.actionOps[a]
		if ops == nil {
			ops = map[string]bool{}
			t.actionOps[a] = ops
		}
		if !ops[r.OperationID] {
			ops[r.OperationID] = true
			t.opAction[r.OperationID] = append(t.opAction[r.OperationID], a)
		}
		// Results of one operation may arrive out of order: the highest
		// version is the newest.
		if v, ok := t.opVersion[r.OperationID]; !ok || r.Version > v {
			t.opVersion[r.OperationID] = r.Version
			settled := r.Final || r.Status == string(op.StateEscalated) || r.Status == string(op.StateAwaitingApproval)
			if _, done := t.opSettled[r.OperationID]; settled && !done {
				t.opSettled[r.OperationID] = at
			} else if !settled {
				delete(t.opSettled, r.OperationID)
			}
		}
	}
}

// actionSettled: every message of the action that reached the ledger was
// answered, and every operation it was answered with is settled. The
// caller holds mu.
func (t *tracker) actionSettled(a *action) bool {
	for _, m := range a.msgs {
		if !t.answered[m.eventID] {
			return false
		}
	}
	ops := t.actionOps[a]
	if len(ops) == 0 {
		return false
	}
	for id := range ops {
		if _, ok := t.opSettled[id]; !ok {
			return false
		}
	}
	return true
}

// phaseSettled reports whether every action of p is settled.
func (t *tracker) phaseSettled(p *phase) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range p.actions {
		if !t.actionSettled(a) {
			return false
		}
	}
	return true
}

// progress is a snapshot for the progress line.
type progress struct {
	published, messages, answered, events, settled, actions int
}

func (t *tracker) snapshot() progress {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := progress{published: t.published, messages: t.messages, answered: len(t.answered), events: len(t.byEvent)}
	seen := map[*action]bool{}
	for _, a := range t.byEvent {
		if seen[a] {
			continue
		}
		seen[a] = true
		p.actions++
		if t.actionSettled(a) {
			p.settled++
		}
	}
	return p
}

// wasPublished reports whether the agent published eventID (JetStream
// stored it, or dropped it as a copy of one it stored).
func (t *tracker) wasPublished(eventID string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stored[eventID] > 0 || t.dropped[eventID]
}

// isAnswered reports whether the agent has an answer to eventID.
func (t *tracker) isAnswered(eventID string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.answered[eventID]
}

// settledAt is when the agent got the result that settled operation id.
func (t *tracker) settledAt(id string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.opSettled[id]
}

// firstPublish is when the action's first message was published.
func (t *tracker) firstPublish(a *action) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.firstPub[a]
}

func (t *tracker) jetstreamDuplicates() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.jsDup
}

// isOurs reports whether a result belongs to a workflow of this run.
func isOurs(r wire.Result, run string) bool {
	return strings.HasPrefix(r.WorkflowID, "ev_"+run+"_")
}
