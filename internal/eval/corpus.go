package eval

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/vendors"
)

// Scenarios: one fault mode each (the article's fault-injection harness),
// plus duplicate deliveries.
const (
	ScenarioSuccess             = "success"
	ScenarioTimeoutAfterCommit  = "timeout_after_commit"
	ScenarioTimeoutBeforeCommit = "timeout_before_commit"
	// Scenario500DelayedVisibility: the vendor performs the effect and
	// answers 500, and its lookup does not see the effect for a while.
	Scenario500DelayedVisibility = "error_500_delayed_visibility"
	ScenarioRateLimit            = "rate_limit_429"
	ScenarioMalformed            = "malformed_after_commit"
	// ScenarioLatencyNear: the vendor takes 80% of the tool's timeout.
	ScenarioLatencyNear = "latency_near_timeout"
	// ScenarioLatencyBeyond: the vendor takes 125% of the tool's timeout,
	// and applies the effect after the client gave up.
	ScenarioLatencyBeyond = "latency_beyond_timeout"
	// ScenarioLatencyFar: the vendor takes 3.5 times the tool's timeout
	// (issue 8.1: send_email taking 6-8 s against a 2 s timeout) and
	// applies the effect long after the client gave up, while lookups find
	// nothing: a "not found" then is no evidence, until the apply bound has
	// passed.
	ScenarioLatencyFar = "latency_far_beyond_timeout"
	ScenarioReset      = "reset_after_commit"
	// ScenarioDuplicates: every action is published several times (the same
	// event id with and without Nats-Msg-Id, re-plans under new event ids),
	// and a quarter are near-duplicates of another, genuinely different.
	ScenarioDuplicates = "duplicate_deliveries"
	// ScenarioLookAlikes: every action is re-planned with look-alike
	// arguments: the same order id or conversation with invisible
	// characters (zero-width space, byte order mark), the email address in
	// other cases. One action each: identity normalization must fold them.
	ScenarioLookAlikes = "look_alike_replans"
	// ScenarioSetBack: update_crm_record sets a record's status active,
	// suspended, then active again, each step sent once the previous one
	// was answered, each also re-planned (reordered arguments, enum case,
	// an invisible character in the record id). Three actions, three
	// effects: setting something back is a new action, while a repeat of
	// the step just taken is not.
	ScenarioSetBack = "set_back_sequences"
)

// DefaultScenarios are run unless told otherwise.
var DefaultScenarios = []string{
	ScenarioSuccess, ScenarioTimeoutAfterCommit, ScenarioTimeoutBeforeCommit, Scenario500DelayedVisibility,
	ScenarioRateLimit, ScenarioMalformed, ScenarioLatencyNear, ScenarioLatencyBeyond, ScenarioLatencyFar, ScenarioReset,
	ScenarioDuplicates, ScenarioLookAlikes, ScenarioSetBack,
}

// AllScenarios are every scenario Config.Scenarios may name.
var AllScenarios = slices.Clone(DefaultScenarios)

// toolSpec is a tool of the example registry the corpus uses, with where
// its vendor counts the effects.
type toolSpec struct {
	name   string
	route  string // vendors route of its write, where faults go
	lookup string // vendors route of its lookup
	kind   string // vendors effect kind
	short  string
}

var tools = []toolSpec{
	// irreversible, the vendor honours Idempotency-Key
	{name: "capture_payment", route: vendors.RouteCapture, lookup: vendors.RouteCaptureLookup, kind: vendors.KindCapture, short: "pay"},
	// non-idempotent: every accepted request sends a message
	{name: "send_email", route: vendors.RouteEmail, lookup: vendors.RouteEmailLookup, kind: vendors.KindEmail, short: "mail"},
	// idempotent
	{name: "create_ticket", route: vendors.RouteTicket, lookup: vendors.RouteTicketLookup, kind: vendors.KindTicket, short: "tick"},
}

// crmTool runs only in ScenarioSetBack, in a lane of its own after the
// others': update_crm_record's key is scoped by the record's version
// ({entity_version}), and the CRM counts only writes that changed a record.
var crmTool = toolSpec{name: "update_crm_record", route: vendors.RouteCRM, lookup: vendors.RouteCRMGet, kind: vendors.KindCRM, short: "crm"}

// allTools are the tools of every lane, in lane order.
var allTools = append(slices.Clone(tools), crmTool)

// setBackValues are the statuses a set-back sequence sets, in order.
var setBackValues = []string{"active", "suspended", "active"}

// action is one distinct business action and the messages asking for it.
type action struct {
	id       string
	scenario string
	tool     toolSpec
	workflow string
	near     bool
	// entityKind and entity name where the vendor counts its effects
	// independently of opledger's keys ("" for tickets: only by key).
	entityKind, entityAttr, entity string
	msgs                           []message
	// step is the action's place in its set-back sequence and value the
	// status it sets (ScenarioSetBack only): each step is sent once the
	// one before it was answered.
	step  int
	value string
}

// message is one publish.
type message struct {
	eventID string
	kind    string
	args    json.RawMessage
	noMsgID bool
	// delay is when it is published, after the action's first message.
	delay time.Duration
}

// phase is the actions of one scenario for one tool: the unit a lane runs
// with one fault injected at the tool's vendor route.
type phase struct {
	scenario string
	tool     toolSpec
	actions  []*action
}

// buildCorpus makes n actions per scenario, spread over the tools, grouped
// in phases per tool (lanes) in scenario order. Identifiers carry run, so
// that runs against a kept database never meet.
func buildCorpus(run string, scenarios []string, n int, seed uint64) [][]*phase {
	rng := rand.New(rand.NewPCG(seed, 0x6576616c))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	lanes := make([][]*phase, len(allTools))
	for _, sc := range scenarios {
		code := fmt.Sprintf("s%02d", slices.Index(AllScenarios, sc))
		if sc == ScenarioSetBack {
			lanes[len(tools)] = append(lanes[len(tools)], setBackPhase(run, code, n))
			continue
		}
		for ti, t := range tools {
			k := n/len(tools) + boolInt(ti < n%len(tools))
			if k == 0 {
				continue
			}
			p := &phase{scenario: sc, tool: t}
			wf := fmt.Sprintf("ev_%s_%s_%s", run, code, t.short)
			for j := range k {
				a := &action{id: fmt.Sprintf("%s/%s/%d", sc, t.name, j), scenario: sc, tool: t, workflow: wf}
				base := fmt.Sprintf("%s:%s:%s:%d", run, code, t.short, j)
				entityOf := j
				if sc == ScenarioDuplicates && j%4 == 3 {
					// A near-duplicate of the action before it: the same
					// entity, another business action.
					a.near, entityOf = true, j-1
				}
				ent := fmt.Sprintf("%s_%s_%d", run, code, entityOf)
				args, variant := argsFor(t, ent, j, a.near)
				a.msgs = append(a.msgs, message{eventID: base + ":call", kind: MsgOriginal, args: args})
				switch {
				case sc == ScenarioLookAlikes:
					a.msgs = append(a.msgs, message{eventID: base + ":replan", kind: MsgReplanLookAlike,
						args: lookAlike(t, args, j), delay: between(200*time.Millisecond, time.Second)})
				case sc == ScenarioDuplicates && !a.near:
					a.msgs = append(a.msgs,
						message{eventID: base + ":call", kind: MsgRedeliveryMsgID, args: args, delay: between(0, 500*time.Millisecond)},
						message{eventID: base + ":call", kind: MsgRedeliveryNoMsgID, args: args, noMsgID: true, delay: between(0, time.Second)},
						message{eventID: base + ":replan1", kind: MsgReplan, args: args, delay: between(0, time.Second)},
						message{eventID: base + ":replan2", kind: MsgReplan, args: variant, noMsgID: j%2 == 0, delay: between(0, time.Second)})
				case sc != ScenarioDuplicates && j%5 == 4:
					// The agent gave up waiting and asked again: during
					// the ambiguity, in the fault scenarios.
					a.msgs = append(a.msgs, message{eventID: base + ":replan", kind: MsgReplan, args: variant,
						delay: between(200*time.Millisecond, 1500*time.Millisecond)})
				}
				switch t.kind {
				case vendors.KindCapture:
					a.entityKind, a.entityAttr, a.entity = t.kind, vendors.AttrOrderID, "ord_"+ent
				case vendors.KindEmail:
					a.entityKind, a.entityAttr, a.entity = t.kind, vendors.AttrMailbox, strings.ToLower(mailboxOf(ent))
				}
				p.actions = append(p.actions, a)
			}
			lanes[ti] = append(lanes[ti], p)
		}
	}
	return lanes
}

// setBackPhase makes n update_crm_record actions: set-back sequences of
// three steps on one record each (the last may be shorter).
func setBackPhase(run, code string, n int) *phase {
	t := crmTool
	p := &phase{scenario: ScenarioSetBack, tool: t}
	wf := fmt.Sprintf("ev_%s_%s_%s", run, code, t.short)
	for j := range n {
		rec, step := fmt.Sprintf("rec_%s_%s_%d", run, code, j/len(setBackValues)), j%len(setBackValues)
		v := setBackValues[step]
		a := &action{id: fmt.Sprintf("%s/%s/%d", ScenarioSetBack, t.name, j), scenario: ScenarioSetBack, tool: t, workflow: wf,
			entityKind: t.kind, entity: rec, step: step, value: v}
		base := fmt.Sprintf("%s:%s:%s:%d", run, code, t.short, j)
		args := raw(`{"record_id":%q,"field":"status","value":%q}`, rec, v)
		a.msgs = append(a.msgs, message{eventID: base + ":call", kind: MsgOriginal, args: args})
		if step == 1 {
			// The same step again, with an invisible character in the id.
			a.msgs = append(a.msgs, message{eventID: base + ":replan", kind: MsgReplanLookAlike,
				args: raw(`{"record_id":%q,"field":"status","value":%q}`, rec[:4]+"​"+rec[4:], v)})
		} else {
			// The same step again, re-planned: other key order, white
			// space, enum case.
			a.msgs = append(a.msgs, message{eventID: base + ":replan", kind: MsgReplan,
				args: raw(`{ "value": %q, "field": "STATUS", "record_id": " %s " }`, v, rec)})
		}
		p.actions = append(p.actions, a)
	}
	return p
}

// argsFor returns an action's arguments and a variant a re-planning model
// might write that canonicalizes alike (other key order, white space, enum
// case, padded strings). A near-duplicate differs from the action on the
// same entity in a field of its key: another amount, reference or queue.
func argsFor(t toolSpec, ent string, j int, near bool) (args, variant json.RawMessage) {
	switch t.kind {
	case vendors.KindCapture:
		order, amount := "ord_"+ent, 100+j%5000
		if near {
			amount++
		}
		return raw(`{"order_id":%q,"customer_id":"cust_%d","amount_cents":%d,"currency":"USD"}`, order, j%97, amount),
			raw(`{ "currency" : "usd",
  "amount_cents": %d, "customer_id": "cust_%d", "order_id": " %s " }`, amount, j%97, order)
	case vendors.KindEmail:
		// A near-duplicate is another template to the same person: a
		// different action even under the tool's dedupe window, which
		// suppresses the same template to the same address for a day.
		ref, tmpl, variant := "ref_"+ent, "payment_receipt", "Payment_Receipt"
		if near {
			tmpl, variant = "follow_up", "Follow_Up"
		}
		// The variant also spells out the schema's default subject.
		return raw(`{"to":%q,"template":%q,"reference":%q}`, mailboxOf(ent), tmpl, ref),
			raw(`{"reference": " %s ", "subject": "", "template": %q, "to": %q}`, ref, variant, mailboxOf(ent))
	default:
		queue := "billing"
		if near {
			queue = "technical"
		}
		conv := "conv_" + ent
		return raw(`{"conversation_id":%q,"queue":%q,"summary":"eval ticket %d"}`, conv, queue, j),
			raw(`{"summary":"eval ticket %d",  "queue": %q, "conversation_id":"%s "}`, j, strings.ToUpper(queue), conv)
	}
}

// mailboxOf is the email address of an entity, in lower case.
func mailboxOf(ent string) string { return "cust." + ent + "@eval.example" }

// lookAlike rewrites an action's identity fields the way a re-planning
// model or a copy-paste might, so they look the same and mean the same: an
// invisible character added, an email address in other cases.
func lookAlike(t toolSpec, args json.RawMessage, j int) json.RawMessage {
	var m map[string]any
	if json.Unmarshal(args, &m) != nil {
		return args
	}
	invisible := []string{"\u200b", "\ufeff", "\u2060", "\u00ad", "\u200d"}[j%5]
	switch t.kind {
	case vendors.KindCapture:
		order, _ := m["order_id"].(string)
		m["order_id"] = order[:len(order)/2] + invisible + order[len(order)/2:]
	case vendors.KindEmail:
		to, _ := m["to"].(string)
		local, domain, _ := strings.Cut(to, "@")
		if j%2 == 0 {
			local = strings.ToUpper(local[:1]) + local[1:]
		}
		m["to"] = local + invisible + "@" + strings.ToUpper(domain)
	default:
		conv, _ := m["conversation_id"].(string)
		m["conversation_id"] = invisible + conv
	}
	out, _ := json.Marshal(m)
	return out
}

func raw(format string, a ...any) json.RawMessage { return json.RawMessage(fmt.Sprintf(format, a...)) }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// faultFor is the fault a scenario injects for k requests on a tool's
// route; ok is false for none. timeout is the tool's timeout.
func faultFor(sc string, t toolSpec, k int, timeout, visibility time.Duration) (vendors.Fault, bool) {
	f := vendors.Fault{Route: t.route, Times: k}
	switch sc {
	case ScenarioTimeoutAfterCommit:
		f.Kind = vendors.FaultTimeoutAfterCommit
	case ScenarioTimeoutBeforeCommit:
		f.Kind = vendors.FaultTimeoutBeforeCommit
	case Scenario500DelayedVisibility:
		f.Kind, f.Delay = vendors.FaultDelayedVisibility, visibility
	case ScenarioRateLimit:
		f.Kind = vendors.FaultRateLimit
	case ScenarioMalformed:
		f.Kind = vendors.FaultMalformedAfterCommit
	case ScenarioLatencyNear:
		f.Kind, f.Delay = vendors.FaultLatency, timeout*8/10
	case ScenarioLatencyBeyond:
		f.Kind, f.Delay = vendors.FaultLatency, timeout*5/4
	case ScenarioLatencyFar:
		f.Kind, f.Delay = vendors.FaultLatency, timeout*7/2
	case ScenarioReset:
		f.Kind = vendors.FaultResetAfterCommit
	default:
		return vendors.Fault{}, false
	}
	return f, k > 0
}
