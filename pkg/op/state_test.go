package op_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/opledger/opledger/pkg/op"
)

// legal is written out by hand, independently of the package's table, so that
// a change to the state machine must be made twice — here on purpose.
var legal = map[op.State]map[op.Event]op.State{
	op.StatePlanned: {
		op.EventRequireApproval: op.StateAwaitingApproval,
		op.EventEnqueue:         op.StatePendingDispatch,
		op.EventReject:          op.StateRejected,
		op.EventCancel:          op.StateCancelled,
	},
	op.StateAwaitingApproval: {
		op.EventApprove: op.StatePendingDispatch,
		op.EventReject:  op.StateRejected,
		op.EventCancel:  op.StateCancelled,
		op.EventVote:    op.StateAwaitingApproval,
	},
	op.StateRejected: {},
	op.StatePendingDispatch: {
		op.EventDispatch: op.StateDispatched,
		op.EventCancel:   op.StateCancelled,
	},
	op.StateDispatched: {
		op.EventAcknowledge:    op.StateAcknowledged,
		op.EventSucceed:        op.StateCompletedSuccess,
		op.EventNoop:           op.StateCompletedNoop,
		op.EventFailRetryable:  op.StateFailedRetryable,
		op.EventFailPermanent:  op.StateFailedPermanent,
		op.EventOutcomeUnknown: op.StateUnknownOutcome,
		op.EventEscalate:       op.StateEscalated,
	},
	op.StateAcknowledged: {
		op.EventSucceed:        op.StateCompletedSuccess,
		op.EventNoop:           op.StateCompletedNoop,
		op.EventFailPermanent:  op.StateFailedPermanent,
		op.EventOutcomeUnknown: op.StateUnknownOutcome,
		op.EventEscalate:       op.StateEscalated,
	},
	op.StateCompletedSuccess: {
		op.EventCompensate: op.StateCompensating,
	},
	op.StateCompletedNoop: {},
	op.StateFailedRetryable: {
		op.EventRetry:         op.StatePendingDispatch,
		op.EventFailPermanent: op.StateFailedPermanent,
		op.EventEscalate:      op.StateEscalated,
		op.EventCancel:        op.StateCancelled,
	},
	op.StateFailedPermanent: {
		op.EventEscalate:   op.StateEscalated,
		op.EventCompensate: op.StateCompensating,
		op.EventReopen:     op.StatePendingDispatch,
	},
	op.StateUnknownOutcome: {
		op.EventSucceed:       op.StateCompletedSuccess,
		op.EventNoop:          op.StateCompletedNoop,
		op.EventFailRetryable: op.StateFailedRetryable,
		op.EventFailPermanent: op.StateFailedPermanent,
		op.EventEscalate:      op.StateEscalated,
	},
	op.StateEscalated: {
		op.EventRequeue:       op.StatePendingDispatch,
		op.EventSucceed:       op.StateCompletedSuccess,
		op.EventNoop:          op.StateCompletedNoop,
		op.EventFailPermanent: op.StateFailedPermanent,
		op.EventCompensate:    op.StateCompensating,
	},
	op.StateCompensating: {
		op.EventCompensated:      op.StateCompensated,
		op.EventCompensationFail: op.StateEscalated,
		// A compensation that ended without doing anything: the original
		// goes back to where it was compensated from.
		op.EventSucceed:       op.StateCompletedSuccess,
		op.EventFailPermanent: op.StateFailedPermanent,
		op.EventEscalate:      op.StateEscalated,
	},
	op.StateCompensated: {},
	op.StateCancelled:   {},
}

func TestTransitionExhaustive(t *testing.T) {
	t.Parallel()
	if len(legal) != len(op.States) {
		t.Fatalf("test table covers %d states, package has %d", len(legal), len(op.States))
	}
	pairs, allowed := 0, 0
	for _, from := range op.States {
		want, ok := legal[from]
		if !ok {
			t.Fatalf("state %q missing from the test table", from)
		}
		for _, ev := range op.Events {
			pairs++
			got, err := op.Transition(from, ev)
			if to, ok := want[ev]; ok {
				allowed++
				if err != nil || got != to {
					t.Errorf("Transition(%s, %s) = %q, %v; want %q", from, ev, got, err, to)
				}
				continue
			}
			var te *op.TransitionError
			if !errors.As(err, &te) || !errors.Is(err, op.ErrIllegalTransition) {
				t.Errorf("Transition(%s, %s) = %q, %v; want *TransitionError", from, ev, got, err)
				continue
			}
			if te.From != from || te.Event != ev || got != "" {
				t.Errorf("Transition(%s, %s): error names %s/%s, state %q", from, ev, te.From, te.Event, got)
			}
			if msg := err.Error(); !strings.Contains(msg, string(from)) || !strings.Contains(msg, string(ev)) {
				t.Errorf("Transition(%s, %s): error %q does not name both", from, ev, msg)
			}
		}
	}
	if pairs != len(op.States)*len(op.Events) || allowed == 0 {
		t.Fatalf("walked %d pairs, %d legal", pairs, allowed)
	}
}

func TestTransitionUnknownInputs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		from op.State
		ev   op.Event
	}{{"bogus", op.EventDispatch}, {op.StatePendingDispatch, "bogus"}, {"", ""}} {
		if _, err := op.Transition(tc.from, tc.ev); !errors.Is(err, op.ErrIllegalTransition) {
			t.Errorf("Transition(%q, %q) err = %v", tc.from, tc.ev, err)
		}
	}
}

func TestTerminalStatesAcceptOnlyCompensation(t *testing.T) {
	t.Parallel()
	for _, s := range op.States {
		if !s.Terminal() {
			continue
		}
		for _, ev := range op.Events {
			if _, err := op.Transition(s, ev); err == nil && ev != op.EventCompensate && ev != op.EventEscalate && ev != op.EventReopen {
				t.Errorf("terminal state %s accepts %s", s, ev)
			}
		}
	}
}

func TestOutcomeEvents(t *testing.T) {
	t.Parallel()
	// Every outcome an adapter can report must be recordable from dispatched.
	for _, o := range []op.Outcome{op.OutcomeSuccess, op.OutcomeNoop, op.OutcomeAcknowledged,
		op.OutcomeRetryable, op.OutcomePermanent, op.OutcomeUnknown} {
		if _, err := op.Transition(op.StateDispatched, o.Event()); err != nil {
			t.Errorf("outcome %s: %v", o, err)
		}
	}
}

func TestRecommendNeverClaimsUnconfirmedSuccess(t *testing.T) {
	t.Parallel()
	for _, s := range op.States {
		rec, msg := op.Recommend(s)
		if msg == "" || rec == "" {
			t.Errorf("state %s: empty recommendation", s)
		}
		if s != op.StateCompletedSuccess && strings.Contains(msg, "completed") {
			t.Errorf("state %s claims completion: %q", s, msg)
		}
	}
	if rec, _ := op.Recommend(op.StateUnknownOutcome); rec != op.RecommendReconcileBeforeRetry {
		t.Errorf("unknown_outcome recommends %s", rec)
	}
}

func TestNewIDSortsAndIsUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	prev := ""
	for range 1000 {
		id := op.NewID("op")
		if len(id) != len("op_")+26 || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		if id[:13] < prev[:min(13, len(prev))] {
			t.Fatalf("id %q sorts before %q", id, prev)
		}
		seen[id] = true
		prev = id
	}
}
