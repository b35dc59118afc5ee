// Package httpadapter is a generic adapter.Adapter and adapter.Looker for
// vendors with an HTTP API that answers in JSON, configured per tool from the
// registry. Requests carry the canonical args as JSON, or a body built from
// them by a template (JSON or form-encoded).
//
// Its job is to turn whatever happened on the wire into an op.Outcome without
// ever guessing optimistically. The line it draws is whether the request was
// completely written to the vendor: a failure before that (connection
// refused, DNS, dial timeout) is retryable, because the vendor cannot have
// acted on a request it never received; a failure after it (timeout, reset,
// EOF) is unknown, because it may have.
//
// Secrets: header values, request bodies and response bodies never appear in
// a Result, an error or a log line; this package does not log. What it reads
// from the vendor and returns (object and request ids) is bounded: at most
// 255 bytes of UTF-8 without control characters, or the response counts as
// malformed.
package httpadapter

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/pkg/op"
)

// Config describes one tool's vendor call.
type Config struct {
	// Method is GET, POST, PUT, PATCH or DELETE; default POST. GET sends no body.
	Method string
	// URL is a template: {field} is the value at a dotted path in the
	// canonical args (e.g. {customer.id}, {items.0.sku}), {idempotency_key}
	// and {operation_id} the request's. Values are path-escaped, or
	// query-escaped after the '?'. A field that is missing, empty or not a
	// scalar fails the call as permanent before anything is sent.
	URL string
	// Body, when set, builds the request body from the canonical args (see
	// BodyConfig); nil sends the canonical args themselves as JSON.
	Body *BodyConfig
	// Headers are static headers sent on every request (calls and lookups),
	// verbatim. A value may not reference a secret (${NAME}: use
	// SecretHeaders), and credential headers (Authorization,
	// Proxy-Authorization, Cookie, X-Api-Key) belong in SecretHeaders.
	Headers map[string]string
	// SecretHeaders are sent like Headers, but every value references at
	// least one secret as ${NAME} (e.g. "Bearer ${PAYMENTS_API_KEY}"),
	// resolved once by New through Secret; New fails if one is unknown or
	// empty. Their values never appear in errors, results or String.
	SecretHeaders map[string]string
	// Secret resolves ${NAME} references in SecretHeaders. The program
	// supplies it at its edge (opledger's binaries read the environment); nil
	// makes any ${NAME} reference an error.
	Secret func(name string) (string, bool)
	// IdempotencyHeader carries the idempotency key, e.g. "Idempotency-Key";
	// "" when the vendor has no idempotency support.
	IdempotencyHeader string
	// ReferenceHeader also carries the idempotency key, for vendors that only
	// store it as a client reference (e.g. "X-Client-Reference").
	ReferenceHeader string
	// Timeout bounds one call or lookup, response body included; default 10s.
	Timeout time.Duration
	// StatusOutcomes maps HTTP statuses to outcomes. Keys are exact codes
	// ("409") or classes ("4xx"). Precedence: exact key, class key, then the
	// defaults: 2xx success; 408, 425, 429 retryable; other 4xx permanent;
	// 5xx and anything else unknown.
	StatusOutcomes map[string]op.Outcome
	// ExternalIDPointer is a JSON pointer (RFC 6901) to the vendor's object id
	// in a positive response, e.g. "/id". When set, a 2xx whose body is not
	// JSON is OutcomeUnknown, category malformed_response: the effect may
	// have happened, but we could not read what the vendor said.
	ExternalIDPointer string
	// StatusPointer is an optional JSON pointer to the vendor's status in the
	// body of a 2xx with a positive outcome, for vendors that answer 200 to
	// a request they did not (yet) carry out. When set, such a body must
	// hold a non-empty scalar there (else malformed_response), and the value
	// lists below decide, as for LookupConfig: a pending value makes the
	// outcome OutcomeAcknowledged, a failed value OutcomePermanent (category
	// failed_status), a succeeded value keeps the status code's outcome, and
	// a value in no list while SucceededValues is set is OutcomeUnknown
	// (category unrecognized_value). When SucceededValues is empty, any
	// value in neither other list keeps the status code's outcome.
	StatusPointer   string
	PendingValues   []string
	FailedValues    []string
	SucceededValues []string
	// RequestIDHeader names the response header with the vendor's request id.
	RequestIDHeader string
	// RequestIDPointer is a JSON pointer to the vendor's request id in the
	// response body, for vendors that put it there; when both are set, a
	// non-empty value in the body wins over the header.
	RequestIDPointer string
	// ReplayedHeader names the response header that says the vendor answered
	// from its idempotency cache; "true" sets Result.Replayed.
	ReplayedHeader string
	// Lookup, when set, lets the reconciler ask the vendor about an earlier call.
	Lookup *LookupConfig
}

// Body encodings.
const (
	// EncodingJSON sends the body as application/json.
	EncodingJSON = "json"
	// EncodingForm sends the body as application/x-www-form-urlencoded.
	EncodingForm = "form"
)

// BodyConfig builds a request body from the canonical args, for vendors that
// do not take the tool's arguments as they are.
type BodyConfig struct {
	// Encoding is EncodingJSON (default) or EncodingForm.
	Encoding string
	// Fields maps each vendor field name to its value, which is either a
	// literal (a number, a boolean, or a string without placeholders) or a
	// template string over the canonical args: {field} is the value at a
	// dotted path in the args, {idempotency_key} and {operation_id} the
	// request's; {{ and }} stand for literal braces.
	//
	// A string that is exactly one placeholder ("{amount_cents}") keeps the
	// value's JSON type in a JSON body: a number stays a number, and an
	// object or array is copied whole. A placeholder inside other text must
	// be a string, number or boolean, and the result is a string.
	//
	// JSON bodies may nest: a value may be a map[string]any (an object) or a
	// []any (an array) of such values, and null. Form bodies are flat: name
	// nested fields the way the vendor expects, e.g. "metadata[order_id]";
	// their values are scalars, sent as text (numbers as their JSON text,
	// booleans as true or false).
	//
	// A placeholder whose field is missing or null fails the call as
	// permanent before anything is sent; an empty string is a value.
	Fields map[string]any
}

// LookupConfig describes how to ask the vendor whether an effect happened.
type LookupConfig struct {
	// Method is GET or POST; default GET.
	Method string
	// URL is a template like Config.URL, usually with {idempotency_key}.
	URL string
	// FoundStatus means the vendor has a record (default 200);
	// NotFoundStatus means it has none (default 404). Any other status is
	// an error: the lookup itself failed.
	FoundStatus    int
	NotFoundStatus int
	// ExternalIDPointer is a JSON pointer to the object id in the found body.
	// When set, a found body without a non-empty id there (a search
	// endpoint's empty list, say) is a lookup error, not a record.
	ExternalIDPointer string
	// StatusPointer is an optional JSON pointer to the vendor's status in the
	// found body. When set, a found body without a status there is a lookup
	// error, and the status decides the outcome through the value lists
	// below. When unset, a found record is OutcomeSuccess and the lists must
	// be empty.
	StatusPointer string
	// PendingValues are vendor statuses that mean "still in progress":
	// Found with OutcomeAcknowledged (look again later).
	PendingValues []string
	// FailedValues are vendor statuses that mean the effect failed for good:
	// Found with OutcomePermanent.
	FailedValues []string
	// SucceededValues are vendor statuses that mean the effect happened:
	// Found with OutcomeSuccess. When empty, every status that is neither
	// pending nor failed counts as success; when not, any status in none of
	// the three lists is a lookup error (an unrecognised status is not
	// evidence either way). The three lists must not share a value.
	SucceededValues []string
}

// ConfigError says which Config field New rejected and why. It matches
// op.ErrInvalid with errors.Is. It never contains a header value.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return "httpadapter: invalid " + e.Field + ": " + e.Reason
}

// Unwrap makes errors.Is(err, op.ErrInvalid) true.
func (e *ConfigError) Unwrap() error { return op.ErrInvalid }

// Adapter calls one tool's vendor over HTTP. It is safe for concurrent use.
type Adapter struct {
	client           *http.Client
	method           string
	url              *urlTemplate
	body             *bodyTemplate // nil: the canonical args as JSON
	headers          http.Header
	secrets          []string // the credential values sent, which no answer may carry back
	idemHeader       string
	refHeader        string
	timeout          time.Duration
	exact            map[int]op.Outcome
	class            [6]op.Outcome // index status/100; "" = not mapped
	idPointer        []string      // nil: not set
	status           *statusValues // nil: not set
	requestIDHdr     string
	requestIDPointer []string
	replayedHeader   string
	lookup           *lookup
}

type lookup struct {
	method    string
	url       *urlTemplate
	found     int
	notFound  int
	idPointer []string
	status    *statusValues // nil: not set
}

// statusValues reads a vendor status from a response body and sorts it into
// the operator's lists.
type statusValues struct {
	pointer   []string
	pending   []string
	failed    []string
	succeeded []string
}

// statusClass is what a vendor status value means.
type statusClass int

const (
	statusSucceeded statusClass = iota
	statusPending
	statusFailed
	statusUnrecognized
)

func (s *statusValues) classify(v string) statusClass {
	switch {
	case slices.Contains(s.pending, v):
		return statusPending
	case slices.Contains(s.failed, v):
		return statusFailed
	case len(s.succeeded) == 0 || slices.Contains(s.succeeded, v):
		return statusSucceeded
	}
	return statusUnrecognized
}

// String names the adapter by method and vendor host only: formatting an
// Adapter (%v, %+v, %#v) never prints its headers.
func (a *Adapter) String() string { return "httpadapter(" + a.method + " " + a.url.host + ")" }

// GoString is String, for %#v.
func (a *Adapter) GoString() string { return a.String() }

// ErrNoLookup is returned by Lookup on an adapter configured without one.
var ErrNoLookup = errors.New("httpadapter: no lookup configured")

// New validates cfg and resolves its secret headers. Redirects are never
// followed: a 3xx is classified like any other status. A nil client means a
// client of the adapter's own whose pool keeps up to 64 idle connections to
// the vendor (http.DefaultClient keeps 2, too few under load). Every error is
// a *ConfigError (op.ErrInvalid).
func New(cfg Config, client *http.Client) (*Adapter, error) {
	if client == nil {
		tr, ok := http.DefaultTransport.(*http.Transport)
		if ok {
			tr = tr.Clone()
		} else {
			tr = &http.Transport{Proxy: http.ProxyFromEnvironment}
		}
		tr.MaxIdleConnsPerHost = 64
		client = &http.Client{Transport: tr}
	}
	c := *client
	// A vendor's redirect must not turn our POST into a GET elsewhere, or re-send it.
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	a := &Adapter{
		client:         &c,
		idemHeader:     cfg.IdempotencyHeader,
		refHeader:      cfg.ReferenceHeader,
		timeout:        cfg.Timeout,
		exact:          map[int]op.Outcome{},
		requestIDHdr:   cfg.RequestIDHeader,
		replayedHeader: cfg.ReplayedHeader,
	}
	var err error
	if a.method, err = parseMethod("Method", cfg.Method, http.MethodPost,
		http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete); err != nil {
		return nil, err
	}
	if a.url, err = parseTemplate("URL", cfg.URL); err != nil {
		return nil, err
	}
	if cfg.Body != nil {
		if a.method == http.MethodGet {
			return nil, &ConfigError{Field: "Body", Reason: "a GET request sends no body"}
		}
		if a.body, err = parseBody(*cfg.Body); err != nil {
			return nil, err
		}
	}
	for _, h := range []struct{ field, name string }{
		{"IdempotencyHeader", cfg.IdempotencyHeader}, {"ReferenceHeader", cfg.ReferenceHeader},
		{"RequestIDHeader", cfg.RequestIDHeader}, {"ReplayedHeader", cfg.ReplayedHeader},
	} {
		if h.name != "" && !validHeaderName(h.name) {
			return nil, &ConfigError{Field: h.field, Reason: "not a valid header name"}
		}
	}
	if a.headers, a.secrets, err = resolveHeaders(cfg); err != nil {
		return nil, err
	}
	if a.timeout < 0 {
		return nil, &ConfigError{Field: "Timeout", Reason: "negative"}
	}
	if a.timeout == 0 {
		a.timeout = 10 * time.Second
	}
	for key, outcome := range cfg.StatusOutcomes {
		if !slices.Contains(outcomes, outcome) {
			return nil, &ConfigError{Field: "StatusOutcomes[" + strconv.Quote(key) + "]", Reason: "unknown outcome " + strconv.Quote(string(outcome))}
		}
		if len(key) == 3 && key[0] >= '1' && key[0] <= '5' && strings.EqualFold(key[1:], "xx") {
			a.class[key[0]-'0'] = outcome
			continue
		}
		code, err := strconv.Atoi(key)
		if err != nil || code < 100 || code > 599 || len(key) != 3 {
			return nil, &ConfigError{Field: "StatusOutcomes[" + strconv.Quote(key) + "]", Reason: `key must be a status code like "409" or a class like "4xx"`}
		}
		a.exact[code] = outcome
	}
	if a.idPointer, err = parsePointer("ExternalIDPointer", cfg.ExternalIDPointer); err != nil {
		return nil, err
	}
	if a.requestIDPointer, err = parsePointer("RequestIDPointer", cfg.RequestIDPointer); err != nil {
		return nil, err
	}
	if a.status, err = newStatusValues("", cfg.StatusPointer, cfg.PendingValues, cfg.FailedValues, cfg.SucceededValues); err != nil {
		return nil, err
	}
	if cfg.Lookup != nil {
		if a.lookup, err = newLookup(*cfg.Lookup); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func newLookup(cfg LookupConfig) (*lookup, error) {
	l := &lookup{found: cfg.FoundStatus, notFound: cfg.NotFoundStatus}
	var err error
	if l.method, err = parseMethod("Lookup.Method", cfg.Method, http.MethodGet, http.MethodGet, http.MethodPost); err != nil {
		return nil, err
	}
	if l.url, err = parseTemplate("Lookup.URL", cfg.URL); err != nil {
		return nil, err
	}
	if l.found == 0 {
		l.found = http.StatusOK
	}
	if l.notFound == 0 {
		l.notFound = http.StatusNotFound
	}
	if l.found < 100 || l.found > 599 {
		return nil, &ConfigError{Field: "Lookup.FoundStatus", Reason: "not an HTTP status"}
	}
	if l.notFound < 100 || l.notFound > 599 || l.notFound == l.found {
		return nil, &ConfigError{Field: "Lookup.NotFoundStatus", Reason: "not an HTTP status, or equal to FoundStatus"}
	}
	if l.idPointer, err = parsePointer("Lookup.ExternalIDPointer", cfg.ExternalIDPointer); err != nil {
		return nil, err
	}
	if l.status, err = newStatusValues("Lookup.", cfg.StatusPointer, cfg.PendingValues, cfg.FailedValues, cfg.SucceededValues); err != nil {
		return nil, err
	}
	return l, nil
}

// newStatusValues validates a status pointer and its value lists (fields
// named with prefix): the lists need the pointer, hold no empty value, and
// share no value. It returns nil when no pointer is set.
func newStatusValues(prefix, pointer string, pending, failed, succeeded []string) (*statusValues, error) {
	ptr, err := parsePointer(prefix+"StatusPointer", pointer)
	if err != nil {
		return nil, err
	}
	lists := []struct {
		field  string
		values []string
	}{
		{prefix + "PendingValues", pending},
		{prefix + "FailedValues", failed},
		{prefix + "SucceededValues", succeeded},
	}
	seen := map[string]string{} // value -> field of the first list holding it
	for _, list := range lists {
		if len(list.values) == 0 {
			continue
		}
		if ptr == nil {
			return nil, &ConfigError{Field: list.field, Reason: "needs " + prefix + "StatusPointer"}
		}
		for _, v := range list.values {
			if v == "" {
				return nil, &ConfigError{Field: list.field, Reason: "contains an empty value"}
			}
			if other, dup := seen[v]; dup && other != list.field {
				return nil, &ConfigError{Field: list.field, Reason: strconv.Quote(v) + " is also in " + other}
			}
			seen[v] = list.field
		}
	}
	if ptr == nil {
		return nil, nil
	}
	return &statusValues{pointer: ptr, pending: slices.Clone(pending), failed: slices.Clone(failed),
		succeeded: slices.Clone(succeeded)}, nil
}

var outcomes = []op.Outcome{
	op.OutcomeSuccess, op.OutcomeNoop, op.OutcomeAcknowledged,
	op.OutcomeRetryable, op.OutcomePermanent, op.OutcomeUnknown,
}

func parseMethod(field, m, def string, allowed ...string) (string, error) {
	if m == "" {
		return def, nil
	}
	m = strings.ToUpper(m)
	if !slices.Contains(allowed, m) {
		return "", &ConfigError{Field: field, Reason: "must be one of " + strings.Join(allowed, ", ")}
	}
	return m, nil
}

// credentialHeaders are header names whose values are credentials: they
// belong in SecretHeaders, never in a registry file as static text.
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key"}

// adapterHeaders are set by the adapter itself on every request.
var adapterHeaders = []string{"Content-Type", "Content-Length", "Host"}

// resolveHeaders checks cfg's static and secret headers and expands the
// ${NAME} references of the secret ones through cfg.Secret.
// It also returns the credential values it sends (each secret, and each
// secret header's whole value), which no vendor answer may carry back.
func resolveHeaders(cfg Config) (http.Header, []string, error) {
	out := http.Header{}
	from := map[string]string{} // canonical name -> field that set it
	reserved := map[string]string{}
	for _, h := range []struct{ field, name string }{
		{"IdempotencyHeader", cfg.IdempotencyHeader}, {"ReferenceHeader", cfg.ReferenceHeader},
	} {
		if h.name != "" {
			reserved[http.CanonicalHeaderKey(h.name)] = h.field
		}
	}
	add := func(field, name, value string) error {
		if !validHeaderName(name) {
			return &ConfigError{Field: field, Reason: "not a valid header name"}
		}
		canon := http.CanonicalHeaderKey(name)
		if other, dup := from[canon]; dup {
			return &ConfigError{Field: field, Reason: "the header is also set by " + other}
		}
		if other, ok := reserved[canon]; ok {
			return &ConfigError{Field: field, Reason: "the header is " + other + ", which carries the idempotency key"}
		}
		if slices.Contains(adapterHeaders, canon) {
			return &ConfigError{Field: field, Reason: "the adapter sets " + canon + " itself"}
		}
		if strings.ContainsFunc(value, func(r rune) bool { return r != '\t' && (r < 0x20 || r == 0x7f) }) {
			return &ConfigError{Field: field, Reason: "value contains a control character"}
		}
		from[canon] = field
		out.Set(canon, value)
		return nil
	}
	for _, name := range sortedKeys(cfg.Headers) {
		raw := cfg.Headers[name]
		field := "Headers[" + strconv.Quote(name) + "]"
		if strings.Contains(raw, "${") {
			return nil, nil, &ConfigError{Field: field, Reason: "a ${NAME} secret reference belongs in SecretHeaders"}
		}
		if slices.Contains(credentialHeaders, http.CanonicalHeaderKey(name)) {
			return nil, nil, &ConfigError{Field: field, Reason: "carries credentials: put it in SecretHeaders with a ${NAME} reference"}
		}
		if err := add(field, name, raw); err != nil {
			return nil, nil, err
		}
	}
	var secrets []string
	for _, name := range sortedKeys(cfg.SecretHeaders) {
		field := "SecretHeaders[" + strconv.Quote(name) + "]"
		v, vals, err := expandSecrets(field, cfg.SecretHeaders[name], cfg.Secret)
		if err != nil {
			return nil, nil, err
		}
		if err := add(field, name, v); err != nil {
			return nil, nil, err
		}
		secrets = append(append(secrets, v), vals...)
	}
	return out, secrets, nil
}

// expandSecrets replaces each ${NAME} in raw with secret(NAME). raw must
// hold at least one reference. Errors name the field and the secret, never
// a value.
func expandSecrets(field, raw string, secret func(string) (string, bool)) (string, []string, error) {
	var b strings.Builder
	rest, refs := raw, 0
	var vals []string
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		end := strings.IndexByte(rest[i:], '}')
		if end < 0 {
			return "", nil, &ConfigError{Field: field, Reason: "unterminated ${ in value"}
		}
		env := rest[i+2 : i+end]
		if !validEnvName(env) {
			return "", nil, &ConfigError{Field: field, Reason: "invalid secret name in ${...}"}
		}
		var val string
		ok := false
		if secret != nil {
			val, ok = secret(env)
		}
		if !ok || val == "" {
			return "", nil, &ConfigError{Field: field, Reason: "secret " + env + " is not set"}
		}
		b.WriteString(val)
		vals = append(vals, val)
		refs++
		rest = rest[i+end+1:]
	}
	if refs == 0 {
		return "", nil, &ConfigError{Field: field, Reason: "references no secret: write it as ${NAME}, or make it a static header"}
	}
	return b.String(), vals, nil
}

// Secrets returns the values the adapter sends as credentials (each secret
// header's value, and each secret it references): the adapter itself keeps
// them out of what it returns (adapter.Redact), and a worker adds them to
// the call's sensitive arguments for the same check (registry's
// CallSecrets). They are never logged.
func (a *Adapter) Secrets() []string { return slices.Clone(a.secrets) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func validEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)) {
			return false
		}
	}
	return true
}

// parsePointer splits an RFC 6901 JSON pointer into unescaped tokens. "" is
// "not set" (nil); "/" is the single empty token.
func parsePointer(field, p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, &ConfigError{Field: field, Reason: `JSON pointer must start with "/"`}
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, &ConfigError{Field: field, Reason: "invalid ~ escape in JSON pointer"}
			}
		}
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks, nil
}

// urlTemplate is a parsed URL template: literals and placeholders.
type urlTemplate struct {
	parts []tmplPart
	host  string // scheme://host of the literal template, for String
}

type tmplPart struct {
	lit   string
	name  string   // placeholder name; "" for a literal
	path  []string // dotted path of an args field; nil for the built-ins
	query bool     // after '?': query-escape instead of path-escape
}

const (
	phIdempotencyKey = "idempotency_key"
	phOperationID    = "operation_id"
)

func parseTemplate(field, s string) (*urlTemplate, error) {
	if s == "" {
		return nil, &ConfigError{Field: field, Reason: "empty"}
	}
	t := &urlTemplate{}
	inQuery := false
	rest := s
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		if closeAt := strings.IndexByte(rest, '}'); closeAt >= 0 && (open < 0 || closeAt < open) {
			return nil, &ConfigError{Field: field, Reason: "unbalanced '}' before " + near(rest[closeAt:])}
		}
		if open < 0 {
			t.parts = append(t.parts, tmplPart{lit: rest})
			break
		}
		if open > 0 {
			lit := rest[:open]
			t.parts = append(t.parts, tmplPart{lit: lit})
			inQuery = inQuery || strings.Contains(lit, "?")
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, &ConfigError{Field: field, Reason: "unbalanced '{' at " + near(rest[open:])}
		}
		name := rest[open+1 : open+end]
		if !validPlaceholder(name) {
			return nil, &ConfigError{Field: field, Reason: "invalid placeholder " + near(rest[open:open+end+1]) +
				": a dotted argument path, {idempotency_key} or {operation_id}"}
		}
		p := tmplPart{name: name, query: inQuery}
		if name != phIdempotencyKey && name != phOperationID {
			p.path = strings.Split(name, ".")
		}
		t.parts = append(t.parts, p)
		rest = rest[open+end+1:]
	}
	// The template must make an absolute http(s) URL whatever the values.
	var b strings.Builder
	for _, p := range t.parts {
		if p.name != "" {
			b.WriteString("x")
		} else {
			b.WriteString(p.lit)
		}
	}
	u, err := url.Parse(b.String())
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &ConfigError{Field: field, Reason: "not an absolute http(s) URL"}
	}
	t.host = u.Scheme + "://" + u.Host
	return t, nil
}

// near quotes the part of a template a problem is at, cut short. It starts
// at a brace, so never shows the base URL before the path.
func near(s string) string {
	if r := []rune(s); len(r) > 24 {
		s = string(r[:24]) + "…"
	}
	return strconv.Quote(s)
}

func validPlaceholder(name string) bool {
	if name == "" || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
		return false
	}
	for _, c := range name {
		if !(c == '_' || c == '.' || c == '-' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// needsArgs reports whether expanding t reads the canonical args.
func (t *urlTemplate) needsArgs() bool {
	for _, p := range t.parts {
		if p.path != nil {
			return true
		}
	}
	return false
}

// errMissing is a template value that cannot be filled in; its text names
// where it goes and the placeholder, never a value.
type errMissing struct{ where, name, why string }

func (e *errMissing) Error() string { return fmt.Sprintf("%s {%s} %s", e.where, e.name, e.why) }

// Placeholder is an argument that one of the adapter's templates reads.
type Placeholder struct {
	// Field is the Config field whose template holds it, spelled as in
	// ConfigError.Field: "URL", `Body.Fields["amount"]`, "Lookup.URL".
	Field string
	// Arg is the dotted path of the argument, e.g. "customer.id".
	Arg string
}

// Placeholders returns every argument that the adapter's URL, body and
// lookup templates read, in that order. The built-ins {idempotency_key} and
// {operation_id} are not arguments and are not listed.
func (a *Adapter) Placeholders() []Placeholder {
	var out []Placeholder
	out = a.url.placeholders("URL", out)
	if a.body != nil {
		out = a.body.root.placeholders(out)
	}
	if a.lookup != nil {
		out = a.lookup.url.placeholders("Lookup.URL", out)
	}
	return out
}

func (t *urlTemplate) placeholders(field string, out []Placeholder) []Placeholder {
	for _, p := range t.parts {
		if p.path != nil {
			out = append(out, Placeholder{Field: field, Arg: p.name})
		}
	}
	return out
}
