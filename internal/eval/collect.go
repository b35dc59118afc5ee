package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
)

// ledgerOp is an operation with its history, as read for the KPIs and for
// the findings.
type ledgerOp struct {
	op       *op.Operation
	events   []op.EventRecord
	attempts []*op.Attempt
}

// effectKind is where the vendors count the effects of a tool.
var effectKind = map[string]string{
	"capture_payment":   vendors.KindCapture,
	"refund_payment":    vendors.KindRefund,
	"send_email":        vendors.KindEmail,
	"create_ticket":     vendors.KindTicket,
	"update_crm_record": vendors.KindCRM,
}

// readLedger reads every operation of the run's workflows with its events
// and attempts, with a few connections at once.
func readLedger(ctx context.Context, st *store.Store, workflows []string) (map[string]*ledgerOp, error) {
	var all []*op.Operation
	for _, wf := range workflows {
		ops, err := st.OperationsByWorkflow(ctx, wf)
		if err != nil {
			return nil, err
		}
		all = append(all, ops...)
	}
	out := make(map[string]*ledgerOp, len(all))
	var mu sync.Mutex
	err := parallel(ctx, len(all), func(i int) error {
		o := all[i]
		evs, err := st.Events(ctx, o.ID)
		if err != nil {
			return err
		}
		atts, err := st.Attempts(ctx, o.ID)
		if err != nil {
			return err
		}
		mu.Lock()
		out[o.ID] = &ledgerOp{op: o, events: evs, attempts: atts}
		mu.Unlock()
		return nil
	})
	return out, err
}

// inboxDecisions reads the ledger's decision on every event id.
func inboxDecisions(ctx context.Context, st *store.Store, ids []string) (map[string]*store.InboxEntry, error) {
	out := make(map[string]*store.InboxEntry, len(ids))
	var mu sync.Mutex
	err := parallel(ctx, len(ids), func(i int) error {
		e, err := st.InboxEntry(ctx, ingest.Source, ids[i])
		if errors.Is(err, op.ErrNotFound) {
			return nil // never reached the ledger
		} else if err != nil {
			return err
		}
		mu.Lock()
		out[ids[i]] = e
		mu.Unlock()
		return nil
	})
	return out, err
}

// parallel runs f(0..n-1) on 8 goroutines and returns the first error.
func parallel(ctx context.Context, n int, f func(i int) error) error {
	const workers = 8
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := range n {
		select {
		case next <- i:
		case err = <-errs:
			break feed
		case <-ctx.Done():
			err = ctx.Err()
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	if err == nil {
		err = <-errs
	}
	return err
}

// observe builds the observations of a run from the ledger, the vendors and
// the tracker.
func observe(lanes [][]*phase, ledger map[string]*ledgerOp, inbox map[string]*store.InboxEntry, v *vendors.Server, tr *tracker) Observations {
	var obs Observations
	scenarioOf := map[string]string{}
	for _, lane := range lanes {
		for _, p := range lane {
			for _, a := range p.actions {
				scenarioOf[a.workflow] = a.scenario
			}
		}
	}
	// Effects per operation, by its idempotency key.
	byKey := map[string]map[string]int{}
	total := 0
	for _, t := range allTools {
		byKey[t.kind] = v.EffectsByKey(t.kind)
		for _, n := range byKey[t.kind] {
			total += n
		}
	}
	// The operations the agent asked for: those its messages were answered with.
	askedFor := map[string]bool{}
	for _, lane := range lanes {
		for _, p := range lane {
			for _, a := range p.actions {
				for _, m := range a.msgs {
					if e := inbox[m.eventID]; e != nil && e.OperationID != "" {
						askedFor[e.OperationID] = true
					}
				}
			}
		}
	}
	attributed := 0
	for _, l := range ledger {
		o := l.op
		x := OperationObs{ID: o.ID, Scenario: scenarioOf[o.WorkflowID], Tool: o.Tool, State: o.State,
			Compensation: o.CompensatesID != "", FinalResultAt: tr.settledAt(o.ID), AskedFor: askedFor[o.ID]}
		if m := byKey[effectKind[o.Tool]]; m != nil {
			x.Effects = m[o.IdempotencyKey]
			attributed += x.Effects
		}
		for _, e := range l.events {
			x.Events = append(x.Events, EventObs{Event: e.Event, From: e.From, To: e.To, At: e.At, Reason: detailReason(e.Detail), Actor: e.Actor})
		}
		for _, a := range l.attempts {
			x.Attempts = append(x.Attempts, AttemptObs{StartedAt: a.StartedAt, FinishedAt: a.FinishedAt, Outcome: a.Outcome})
		}
		obs.Operations = append(obs.Operations, x)
	}
	obs.UnattributedEffects = total - attributed

	// Actions, with the ledger's decision on each message; entities.
	type entKey struct{ scenario, kind, attr, entity string }
	entities := map[entKey]int{}
	lastValue := map[entKey]string{} // set-back sequences: the status the last step sets
	for _, lane := range lanes {
		for _, p := range lane {
			for _, a := range p.actions {
				ao := ActionObs{ID: a.id, Scenario: a.scenario, Tool: a.tool.name, NearDuplicate: a.near, PublishedAt: tr.firstPublish(a)}
				for _, m := range a.msgs {
					mo := MessageObs{EventID: m.eventID, Kind: m.kind, Published: tr.wasPublished(m.eventID), Answered: tr.isAnswered(m.eventID)}
					if e := inbox[m.eventID]; e != nil {
						mo.Decision, mo.OperationID, mo.Redeliveries = e.Decision, e.OperationID, e.DuplicateCount
					}
					ao.Messages = append(ao.Messages, mo)
				}
				obs.Actions = append(obs.Actions, ao)
				if a.entityKind != "" {
					k := entKey{a.scenario, a.entityKind, a.entityAttr, a.entity}
					entities[k]++
					if a.scenario == ScenarioSetBack {
						lastValue[k] = a.value
					}
				}
			}
		}
	}
	counts := map[[2]string]map[string]int{}
	for k, n := range entities {
		if k.kind == vendors.KindCRM {
			// The CRM counts a record's changes in its version (the
			// first write creates it); each step of a set-back sequence
			// must change it, and the last step's value must stand.
			e := EntityObs{Scenario: k.scenario, Kind: k.kind, Entity: k.entity, Actions: n, MustApply: true}
			if rec, ok := v.CRMRecord(k.entity); ok {
				e.Effects = rec.Version
				var status string
				_ = json.Unmarshal(rec.Fields["status"], &status)
				e.WrongFinal = status != lastValue[k]
			} else {
				e.WrongFinal = true
			}
			obs.Entities = append(obs.Entities, e)
			continue
		}
		c := counts[[2]string{k.kind, k.attr}]
		if c == nil {
			c = v.EffectsBy(k.kind, k.attr)
			counts[[2]string{k.kind, k.attr}] = c
		}
		obs.Entities = append(obs.Entities, EntityObs{Scenario: k.scenario, Kind: k.kind, Entity: k.entity, Effects: c[k.entity], Actions: n})
	}
	obs.JetStreamDeduped = tr.jetstreamDuplicates()
	st := v.Stats()
	for _, t := range allTools {
		obs.VendorWrites += st.Requests[t.route]
		obs.VendorLookups += st.Requests[t.lookup]
	}
	return obs
}

// detailReason is the reason an event's detail states: why it escalated
// or was swept, else a reconciler's verdict.
func detailReason(detail json.RawMessage) string {
	var d struct {
		Verdict string `json:"verdict"`
		Reason  string `json:"reason"`
	}
	if len(detail) == 0 || json.Unmarshal(detail, &d) != nil {
		return ""
	}
	if d.Reason != "" {
		return d.Reason
	}
	return d.Verdict
}

// unsettledCount counts operations of the run's workflows that are neither
// final nor owned by a person.
func unsettledCount(ctx context.Context, st *store.Store, workflows []string) (int, error) {
	n := 0
	for _, wf := range workflows {
		ops, err := st.OperationsByWorkflow(ctx, wf)
		if err != nil {
			return 0, fmt.Errorf("eval: %w", err)
		}
		for _, o := range ops {
			if !Settled(o.State) {
				n++
			}
		}
	}
	return n, nil
}
