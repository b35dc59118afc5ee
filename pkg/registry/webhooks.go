package registry

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Webhook is one provider of the registry's webhooks section: how its
// deliveries are authenticated and bounded, and which of its event types
// are evidence about which operations. Secrets are not in the registry: the
// program hands them to the intake at its edge.
type Webhook struct {
	// Provider names the provider, as in POST /webhooks/{provider}.
	Provider string
	// Scheme is how deliveries are signed: SchemeStandardWebhooks or SchemeStripe.
	Scheme string
	// Tolerance is how far a delivery's signed timestamp may be from the
	// receiver's clock, either way.
	Tolerance time.Duration
	// MaxBodyBytes bounds a delivery's body; MaxDepth the nesting of its JSON.
	MaxBodyBytes int
	MaxDepth     int
	// IDPointer is where the delivery id is in the payload (Stripe: the
	// event's id); nil for Standard Webhooks, whose id is the signed
	// webhook-id header.
	IDPointer Pointer
	// TypePointer is where the event type is in the payload.
	TypePointer Pointer
	// Hold is how long evidence waits for its operation to be settleable
	// before it is flagged.
	Hold time.Duration
	// Events maps an event type to what it says; a type not listed is
	// recorded and otherwise ignored.
	Events map[string]*WebhookEvent
}

// Webhook signature schemes.
const (
	// SchemeStandardWebhooks is https://www.standardwebhooks.com: headers
	// webhook-id, webhook-timestamp and webhook-signature ("v1,<base64
	// HMAC-SHA256 of id.timestamp.body>", several separated by spaces),
	// secrets "whsec_<base64 key>".
	SchemeStandardWebhooks = "standard_webhooks"
	// SchemeStripe is Stripe's Stripe-Signature header ("t=<unix>,v1=<hex
	// HMAC-SHA256 of t.body>", v1 repeatable); the secret is used as written.
	SchemeStripe = "stripe"
)

// Match kinds: how a webhook names the operation it is about.
const (
	// MatchIdempotencyKey: the operation's idempotency key, as the vendor
	// received it in the tool's adapter.idempotency_header.
	MatchIdempotencyKey = "idempotency_key"
	// MatchClientReference: the key as the vendor stored it from the tool's
	// adapter.reference_header.
	MatchClientReference = "client_reference"
	// MatchOperationID: opledger's operation id, which the vendor got in a
	// body or URL template ({operation_id}).
	MatchOperationID = "operation_id"
	// MatchExternalObjectID: the vendor's own object id, which the ledger
	// knows once an attempt's answer was read (acknowledged operations).
	MatchExternalObjectID = "external_object_id"
)

// Webhook outcomes: what an event says happened to the effect.
const (
	WebhookSuccess = "success" // the effect happened
	WebhookNoop    = "noop"    // nothing needed doing
	WebhookFailed  = "failed"  // the effect failed for good
)

// WebhookEvent is what one event type says about an operation.
type WebhookEvent struct {
	Type string
	// Tools the operation may be of: evidence about an operation of
	// another tool does not match it.
	Tools []string
	// MatchBy (a Match constant) and MatchPointer: where in the payload
	// the operation's identity is, and which identity it is.
	MatchBy      string
	MatchPointer Pointer
	// Outcome is a Webhook outcome constant.
	Outcome string
	// ExternalIDPointer is where the vendor's object id is; nil when the
	// event carries none.
	ExternalIDPointer Pointer
}

// Pointer is a parsed RFC 6901 JSON pointer: its unescaped tokens.
type Pointer []string

// String renders p as a JSON pointer.
func (p Pointer) String() string {
	var b strings.Builder
	for _, t := range p {
		b.WriteString("/" + strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// Lookup finds the value p points at in v, a JSON value as decoded into
// map[string]any and []any.
func (p Pointer) Lookup(v any) (any, bool) {
	for _, tok := range p {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) || (len(tok) > 1 && tok[0] == '0') {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// ParsePointer parses an RFC 6901 JSON pointer ("/data/0/id"; "~1" is "/"
// and "~0" is "~" in a token).
func ParsePointer(s string) (Pointer, error) {
	if s == "" || s[0] != '/' {
		return nil, fmt.Errorf(`a JSON pointer starts with "/", got %q`, cut(s))
	}
	toks := strings.Split(s[1:], "/")
	for i, t := range toks {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, fmt.Errorf("invalid ~ escape in JSON pointer %q", cut(s))
			}
		}
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks, nil
}

// Webhook defaults and bounds.
const (
	DefaultWebhookTolerance = 5 * time.Minute
	DefaultWebhookMaxBody   = 256 << 10
	DefaultWebhookMaxDepth  = 32
	DefaultWebhookHold      = 10 * time.Minute
	maxWebhookBody          = 16 << 20
	maxWebhookDepth         = 256
)

// Webhook returns the named provider, and whether the registry has it.
func (r *Registry) Webhook(provider string) (*Webhook, bool) {
	w, ok := r.webhooks[provider]
	return w, ok
}

// Webhooks returns the providers' names in sorted order.
func (r *Registry) Webhooks() []string {
	names := make([]string, 0, len(r.webhooks))
	for n := range r.webhooks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// fileWebhook is one provider of the webhooks section as written.
type fileWebhook struct {
	Description  string                       `yaml:"description"`
	Scheme       string                       `yaml:"scheme"`
	Tolerance    string                       `yaml:"tolerance"`
	MaxBodyBytes *int                         `yaml:"max_body_bytes"`
	MaxDepth     *int                         `yaml:"max_depth"`
	IDPointer    string                       `yaml:"id_pointer"`
	TypePointer  string                       `yaml:"type_pointer"`
	Hold         string                       `yaml:"hold"`
	Events       map[string]*fileWebhookEvent `yaml:"events"`
}

type fileWebhookEvent struct {
	Tools             []string          `yaml:"tools"`
	Match             *fileWebhookMatch `yaml:"match"`
	Outcome           string            `yaml:"outcome"`
	ExternalIDPointer string            `yaml:"external_id_pointer"`
}

type fileWebhookMatch struct {
	By      string `yaml:"by"`
	Pointer string `yaml:"pointer"`
}

var (
	providerName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	eventType    = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,200}$`)
)

// sourceWebhook is a provider as decoded from its source.
type sourceWebhook struct {
	fw   *fileWebhook
	file string
	key  *yaml.Node // the provider's name in the file
	node *yaml.Node // its definition
	dec  *decoded
}

// webhookProblems collects the problems of one provider: its fields are
// reported as webhooks.<provider>.<field>, at the line where they are written.
type webhookProblems struct {
	sw   sourceWebhook
	name string
	list []Problem
}

// add reports a problem at the field path (under the provider).
func (p *webhookProblems) add(path []string, format string, args ...any) {
	field := strings.Join(append([]string{"webhooks", p.name}, path...), ".")
	path = slices.Clone(path)
	if shadowed(field, p.sw.dec.shadow[""]) {
		return // the decoder already reported it
	}
	p.list = append(p.list, Problem{File: p.sw.file, Line: nodeLine(p.sw.key, p.sw.node, path), Field: field,
		Msg: fmt.Sprintf(format, args...)})
}

// nodeLine is the line of the deepest key of path found under n, else key's.
func nodeLine(key, n *yaml.Node, path []string) int {
	line := key.Line
	n = resolve(n)
	for _, seg := range path {
		if n == nil || n.Kind != yaml.MappingNode {
			break
		}
		name, _, _ := strings.Cut(seg, "[")
		e, ok := lookupKey(n, seg)
		if !ok {
			if e, ok = lookupKey(n, name); !ok {
				break
			}
		}
		line = e.key.Line
		n = resolve(e.value)
	}
	return line
}

func (p *webhookProblems) duration(path []string, s string, def, most time.Duration) time.Duration {
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > most {
		p.add(path, "must be a positive duration like 5m, at most %s, got %q", most, s)
		return def
	}
	return d
}

func (p *webhookProblems) pointer(path []string, s string) Pointer {
	ptr, err := ParsePointer(s)
	if err != nil {
		p.add(path, "%v", err)
	}
	return ptr
}

// compileWebhook validates one provider against the registry's tools.
func compileWebhook(name string, sw sourceWebhook, tools map[string]sourceTool) (*Webhook, []Problem) {
	p := &webhookProblems{sw: sw, name: name}
	if !providerName.MatchString(name) {
		p.add(nil, "a provider name must be lower-case letters, digits, _ and -, start with a letter and be at most 63 long (%s)", providerName)
		return nil, p.list
	}
	fw := sw.fw
	if fw == nil {
		p.add(nil, "empty definition: it needs at least scheme")
		return nil, p.list
	}
	w := &Webhook{Provider: name, Scheme: fw.Scheme, MaxBodyBytes: DefaultWebhookMaxBody, MaxDepth: DefaultWebhookMaxDepth,
		Events: map[string]*WebhookEvent{}}
	switch fw.Scheme {
	case SchemeStandardWebhooks:
		if fw.IDPointer != "" {
			p.add([]string{"id_pointer"}, "is not for %s: the delivery id is the signed webhook-id header", SchemeStandardWebhooks)
		}
	case SchemeStripe:
		w.IDPointer = Pointer{"id"}
		if fw.IDPointer != "" {
			w.IDPointer = p.pointer([]string{"id_pointer"}, fw.IDPointer)
		}
	case "":
		p.add([]string{"scheme"}, "is required: %s or %s", SchemeStandardWebhooks, SchemeStripe)
	default:
		p.add([]string{"scheme"}, "must be %s or %s, got %q", SchemeStandardWebhooks, SchemeStripe, fw.Scheme)
	}
	w.Tolerance = p.duration([]string{"tolerance"}, fw.Tolerance, DefaultWebhookTolerance, time.Hour)
	w.Hold = p.duration([]string{"hold"}, fw.Hold, DefaultWebhookHold, 7*24*time.Hour)
	if b := fw.MaxBodyBytes; b != nil {
		if *b < 1024 || *b > maxWebhookBody {
			p.add([]string{"max_body_bytes"}, "must be between 1024 and %d, got %d", maxWebhookBody, *b)
		} else {
			w.MaxBodyBytes = *b
		}
	}
	if d := fw.MaxDepth; d != nil {
		if *d < 2 || *d > maxWebhookDepth {
			p.add([]string{"max_depth"}, "must be between 2 and %d, got %d", maxWebhookDepth, *d)
		} else {
			w.MaxDepth = *d
		}
	}
	w.TypePointer = Pointer{"type"}
	if fw.TypePointer != "" {
		w.TypePointer = p.pointer([]string{"type_pointer"}, fw.TypePointer)
	}
	for _, typ := range sortedKeys(fw.Events) {
		path := []string{"events", typ}
		at := func(more ...string) []string { return append(slices.Clone(path), more...) }
		if !eventType.MatchString(typ) {
			p.add(path, "an event type is 1 to 200 letters, digits and _ . : -, got %s", quote(typ))
			continue
		}
		fe := fw.Events[typ]
		if fe == nil {
			p.add(path, "empty definition: it needs tools, match and outcome")
			continue
		}
		ev := &WebhookEvent{Type: typ, Tools: fe.Tools, Outcome: fe.Outcome}
		switch fe.Outcome {
		case WebhookSuccess, WebhookNoop, WebhookFailed:
		case "":
			p.add(at("outcome"), "is required: success, noop or failed")
		default:
			p.add(at("outcome"), "must be success, noop or failed, got %q", fe.Outcome)
		}
		if len(fe.Tools) == 0 {
			p.add(at("tools"), "is required: the tools whose operations this event is about")
		}
		m := fe.Match
		if m == nil {
			p.add(at("match"), "is required: {by, pointer}")
		} else {
			ev.MatchBy = m.By
			switch m.By {
			case MatchIdempotencyKey, MatchClientReference, MatchOperationID, MatchExternalObjectID:
			case "":
				p.add(at("match", "by"), "is required: idempotency_key, client_reference, operation_id or external_object_id")
			default:
				p.add(at("match", "by"), "must be idempotency_key, client_reference, operation_id or external_object_id, got %q", m.By)
			}
			if m.Pointer == "" {
				p.add(at("match", "pointer"), "is required: where in the payload the operation's %s is", cmpOr(m.By, "identity"))
			} else {
				ev.MatchPointer = p.pointer(at("match", "pointer"), m.Pointer)
			}
		}
		if fe.ExternalIDPointer != "" {
			ev.ExternalIDPointer = p.pointer(at("external_id_pointer"), fe.ExternalIDPointer)
		}
		for i, tn := range fe.Tools {
			tp := at("tools[" + strconv.Itoa(i) + "]")
			st, ok := tools[tn]
			switch {
			case !ok:
				p.add(tp, "names unregistered tool %q", tn)
				continue
			case slices.Index(fe.Tools, tn) != i:
				p.add(tp, "names tool %s twice", tn)
				continue
			case st.ft == nil || st.ft.Adapter == nil:
				continue // its own problem says why
			}
			a := st.ft.Adapter
			switch {
			case st.ft.SideEffectClass == "pure_read":
				p.add(tp, "tool %s is a pure_read: a webhook has no effect of it to report", tn)
			case m != nil && m.By == MatchIdempotencyKey && a.IdempotencyHeader == "":
				p.add(tp, "tool %s sends the vendor no idempotency key (adapter.idempotency_header): match by another identity", tn)
			case m != nil && m.By == MatchClientReference && a.ReferenceHeader == "":
				p.add(tp, "tool %s sends the vendor no client reference (adapter.reference_header): match by another identity", tn)
			}
		}
		w.Events[typ] = ev
	}
	return w, p.list
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
