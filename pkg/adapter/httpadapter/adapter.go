package httpadapter

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/op"
	msgwire "github.com/opledger/opledger/pkg/wire"
)

var (
	_ adapter.Adapter = (*Adapter)(nil)
	_ adapter.Looker  = (*Adapter)(nil)
)

// Error categories this package reports in Result.ErrorCategory and LookupError.Category.
const (
	CategoryTimeout           = "timeout"
	CategoryConnection        = "connection"
	CategoryRateLimited       = "rate_limited"
	CategoryClientError       = "client_error"
	CategoryServerError       = "server_error"
	CategoryMalformedResponse = "malformed_response"
	// CategoryUnexpectedStatus: a status outside 4xx/5xx that did not map to
	// a positive outcome (a 3xx, or a 2xx the operator mapped otherwise).
	CategoryUnexpectedStatus = "unexpected_status"
	// CategoryUnrecognizedValue: the vendor status in a body (a call's 2xx
	// or a lookup's found record) is in none of the configured value lists.
	CategoryUnrecognizedValue = "unrecognized_value"
	// CategoryFailedStatus: a 2xx whose body's vendor status is one of the
	// configured failed values (Config.FailedValues).
	CategoryFailedStatus = "failed_status"
)

// maxResponse bounds how much of a response body is read.
const maxResponse = 1 << 20

// MaxVendorID is the longest object or request id, in bytes, that the adapter
// accepts from a vendor. A longer one, or one that is not valid UTF-8 or
// holds a control character (U+0000–U+001F, U+007F), makes the response
// malformed: it is never returned, so never stored.
const MaxVendorID = 255

// boundedID reports whether a vendor-supplied id may be returned and stored.
func boundedID(s string) bool {
	if len(s) > MaxVendorID || !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// vendorID reads the id at ptr in doc: "" when there is none (or it is not a
// string, number or boolean); false when there is one but it is out of
// bounds.
func vendorID(doc any, ptr []string) (string, bool) {
	s, ok := scalarString(walk(doc, ptr))
	if !ok {
		return "", true
	}
	if !boundedID(s) {
		return "", false
	}
	return s, true
}

// Call sends the request and classifies what happened. It never returns an
// error: transport failures become outcomes (see the package doc), statuses
// map through StatusOutcomes, and Result.Error is safe to log and store.
func (a *Adapter) Call(ctx context.Context, req adapter.Request) adapter.Result {
	start := time.Now()
	res := adapter.Redact(a.call(ctx, req), a.secrets)
	res.Latency = time.Since(start)
	return res
}

func (a *Adapter) call(ctx context.Context, req adapter.Request) adapter.Result {
	u, err := a.url.expand(req)
	if err != nil {
		return adapter.Result{Outcome: op.OutcomePermanent, ErrorCategory: CategoryClientError, Error: "request not sent: " + err.Error()}
	}
	var body []byte
	contentType := contentTypeJSON
	switch {
	case a.method == http.MethodGet:
	case a.body != nil:
		if body, err = a.body.render(req); err != nil {
			return adapter.Result{Outcome: op.OutcomePermanent, ErrorCategory: CategoryClientError, Error: "request not sent: " + err.Error()}
		}
		contentType = a.body.contentType
	default:
		body = req.Args
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel() // also bounds reading the body below
	resp, w, err := a.send(ctx, a.method, u, body, contentType, req, true)
	if err != nil {
		return transportFailure(err, w)
	}
	defer drainClose(resp.Body)
	return a.classify(resp)
}

// classify turns a response into a Result.
func (a *Adapter) classify(resp *http.Response) adapter.Result {
	code := resp.StatusCode
	httpStatus := "HTTP " + strconv.Itoa(code)
	res := adapter.Result{HTTPStatus: code, Outcome: a.outcomeFor(code)}
	if a.replayedHeader != "" {
		res.Replayed = strings.EqualFold(strings.TrimSpace(resp.Header.Get(a.replayedHeader)), "true")
	}
	if v := resp.Header.Get("Retry-After"); v != "" {
		res.RetryAfter = parseRetryAfter(v, time.Now())
	}
	if a.requestIDHdr != "" {
		// A request id that cannot be stored is dropped. On an answer that
		// the vendor acted on, that makes the answer malformed (we cannot
		// record what it said); on a refusal (429, 4xx, 5xx) the status
		// alone decides, and the id is only lost.
		v := resp.Header.Get(a.requestIDHdr)
		switch {
		case boundedID(v):
			res.ExternalRequestID = v
		case positive(res.Outcome):
			return malformed(res, httpStatus+" with a request id header that is too long or not plain text")
		}
	}
	body, readErr := readBody(resp.Body)

	if positive(res.Outcome) {
		if a.idPointer == nil && a.status == nil && a.requestIDPointer == nil {
			return res
		}
		// A 2xx means the vendor acted; if we cannot read its answer we do not
		// know what it did, so the outcome is unknown and a lookup settles it.
		strict := code/100 == 2
		if readErr != nil {
			if strict {
				return malformed(res, httpStatus+" but the response body could not be read")
			}
			return res
		}
		doc, err := parseJSON(body)
		if err != nil {
			if strict {
				return malformed(res, httpStatus+" with a response body that is not JSON")
			}
			return res
		}
		if a.requestIDPointer != nil {
			id, ok := vendorID(doc, a.requestIDPointer)
			if !ok {
				return malformed(res, httpStatus+" with a request id in the body that is too long or not plain text")
			}
			if id != "" {
				res.ExternalRequestID = id
			}
		}
		if a.idPointer != nil {
			id, ok := vendorID(doc, a.idPointer)
			if !ok {
				return malformed(res, httpStatus+" with an object id that is too long or not plain text")
			}
			res.ExternalObjectID = id
		}
		if a.status != nil && strict {
			return a.bodyStatus(res, doc)
		}
		return res
	}

	if a.requestIDPointer != nil && readErr == nil {
		if doc, err := parseJSON(body); err == nil {
			if id, ok := vendorID(doc, a.requestIDPointer); ok && id != "" {
				res.ExternalRequestID = id
			}
		}
	}
	res.ErrorCategory = categoryFor(code)
	res.Error = "vendor answered " + httpStatus
	if c := vendorCode(body); c != "" {
		res.Error += " (" + c + ")"
	}
	return res
}

// bodyStatus lets the vendor status in a positive 2xx body refine res: a
// pending status makes it acknowledged, a failed one permanent, an
// unrecognised one unknown; a succeeded status keeps it.
func (a *Adapter) bodyStatus(res adapter.Result, doc any) adapter.Result {
	httpStatus := "HTTP " + strconv.Itoa(res.HTTPStatus)
	st, ok := scalarString(walk(doc, a.status.pointer))
	if !ok || st == "" {
		return malformed(res, httpStatus+" without a status at the configured pointer")
	}
	quoted := "a status"
	if safeToken(st) {
		quoted = "status " + strconv.Quote(st)
	}
	switch a.status.classify(st) {
	case statusPending:
		res.Outcome = op.OutcomeAcknowledged
	case statusFailed:
		res.Outcome = op.OutcomePermanent
		res.ErrorCategory = CategoryFailedStatus
		res.Error = "vendor answered " + httpStatus + " with failed " + quoted
	case statusUnrecognized:
		res.Outcome = op.OutcomeUnknown
		res.ErrorCategory = CategoryUnrecognizedValue
		res.Error = "vendor answered " + httpStatus + " with " + quoted + " that is not a configured pending, failed or succeeded value"
	}
	return res
}

func malformed(res adapter.Result, msg string) adapter.Result {
	res.Outcome = op.OutcomeUnknown
	res.ErrorCategory = CategoryMalformedResponse
	res.Error = msg
	return res
}

func positive(o op.Outcome) bool {
	return o == op.OutcomeSuccess || o == op.OutcomeNoop || o == op.OutcomeAcknowledged
}

// outcomeFor maps a status: the operator's exact code, the operator's class,
// then the defaults.
func (a *Adapter) outcomeFor(code int) op.Outcome {
	if o, ok := a.exact[code]; ok {
		return o
	}
	if cls := code / 100; cls >= 1 && cls <= 5 && a.class[cls] != "" {
		return a.class[cls]
	}
	switch {
	case code/100 == 2:
		return op.OutcomeSuccess
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly, code == http.StatusTooManyRequests:
		return op.OutcomeRetryable // refused before acting
	case code/100 == 4:
		return op.OutcomePermanent
	}
	return op.OutcomeUnknown
}

func categoryFor(code int) string {
	switch {
	case code == http.StatusTooManyRequests:
		return CategoryRateLimited
	case code/100 == 4:
		return CategoryClientError
	case code/100 == 5:
		return CategoryServerError
	}
	return CategoryUnexpectedStatus
}

// LookupError is a failed lookup: no usable answer about the effect. Retry
// the lookup later. Reason never contains header values or bodies.
type LookupError struct {
	// HTTPStatus is the vendor's status, 0 if there was no response.
	HTTPStatus int
	// Category is one of the Category constants.
	Category string
	Reason   string
}

func (e *LookupError) Error() string { return "httpadapter: lookup failed: " + e.Reason }

// Lookup asks the vendor about the effect of req (by its idempotency key or
// other template fields).
//
// NotFoundStatus gives Found == false and a nil error. FoundStatus gives
// Found == true only when the body is evidence of a record:
//   - with ExternalIDPointer set, the body must be JSON with a non-empty
//     scalar there (ExternalObjectID); otherwise it is an error, category
//     malformed_response (e.g. a search endpoint's {"data":[]});
//   - with StatusPointer set, the body must hold a non-empty scalar status
//     there (else malformed_response), which maps to OutcomeAcknowledged if
//     in PendingValues, OutcomePermanent if in FailedValues, OutcomeSuccess
//     if in SucceededValues or, when SucceededValues is empty, if in neither
//     other list; a status in no list while SucceededValues is set is an
//     error, category unrecognized_value;
//   - with neither pointer set, the body is not read: OutcomeSuccess.
//
// Any other HTTP status, a transport failure or an unreadable body is also
// a *LookupError (HTTPStatus set when there was a response); an adapter
// without Lookup returns ErrNoLookup. On an error the LookupResult carries
// only HTTPStatus.
func (a *Adapter) Lookup(ctx context.Context, req adapter.Request) (adapter.LookupResult, error) {
	out, err := a.lookupOnce(ctx, req)
	// The adapter's own credentials never come back out of a lookup: a
	// record whose id holds one cannot be read, and no reason quotes one.
	var le *LookupError
	if errors.As(err, &le) {
		le.Reason = adapter.RedactText(le.Reason, a.secrets)
	}
	if err == nil && adapter.HoldsSecret(out.ExternalObjectID, a.secrets) {
		return adapter.LookupResult{HTTPStatus: out.HTTPStatus}, &LookupError{HTTPStatus: out.HTTPStatus, Category: adapter.CategoryCredentialEcho,
			Reason: "found response has an object id that holds one of this tool's credentials"}
	}
	return out, err
}

func (a *Adapter) lookupOnce(ctx context.Context, req adapter.Request) (adapter.LookupResult, error) {
	l := a.lookup
	if l == nil {
		return adapter.LookupResult{}, ErrNoLookup
	}
	u, err := l.url.expand(req)
	if err != nil {
		return adapter.LookupResult{}, &LookupError{Category: CategoryClientError, Reason: err.Error()}
	}
	var body []byte
	if l.method != http.MethodGet {
		body = req.Args
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	resp, _, err := a.send(ctx, l.method, u, body, contentTypeJSON, req, false)
	if err != nil {
		cat := CategoryConnection
		if isTimeout(err) {
			cat = CategoryTimeout
		}
		return adapter.LookupResult{}, &LookupError{Category: cat, Reason: describe(err)}
	}
	defer drainClose(resp.Body)

	code := resp.StatusCode
	switch code {
	case l.notFound:
		return adapter.LookupResult{HTTPStatus: code}, nil
	case l.found:
	default:
		return adapter.LookupResult{HTTPStatus: code}, &LookupError{HTTPStatus: code, Category: categoryFor(code),
			Reason: "vendor answered HTTP " + strconv.Itoa(code)}
	}
	if l.idPointer == nil && l.status == nil {
		return adapter.LookupResult{HTTPStatus: code, Found: true, Outcome: op.OutcomeSuccess}, nil
	}
	fail := func(category, reason string) (adapter.LookupResult, error) {
		return adapter.LookupResult{HTTPStatus: code}, &LookupError{HTTPStatus: code, Category: category, Reason: reason}
	}
	raw, err := readBody(resp.Body)
	if err != nil {
		return fail(CategoryConnection, "response body could not be read: "+describe(err))
	}
	doc, err := parseJSON(raw)
	if err != nil {
		return fail(CategoryMalformedResponse, "response body is not JSON")
	}
	out := adapter.LookupResult{HTTPStatus: code, Found: true, Outcome: op.OutcomeSuccess}
	if l.idPointer != nil {
		id, ok := vendorID(doc, l.idPointer)
		if !ok {
			return fail(CategoryMalformedResponse, "found response has an object id that is too long or not plain text")
		}
		if id == "" {
			return fail(CategoryMalformedResponse, "found response has no object id at the configured pointer")
		}
		out.ExternalObjectID = id
	}
	if l.status != nil {
		st, ok := scalarString(walk(doc, l.status.pointer))
		if !ok || st == "" {
			return fail(CategoryMalformedResponse, "found response has no status at the configured pointer")
		}
		switch l.status.classify(st) {
		case statusPending:
			out.Outcome = op.OutcomeAcknowledged
		case statusFailed:
			out.Outcome = op.OutcomePermanent
		case statusSucceeded:
			out.Outcome = op.OutcomeSuccess
		default:
			reason := "vendor status is not a configured pending, failed or succeeded value"
			if safeToken(st) {
				reason = "vendor status " + strconv.Quote(st) + " is not a configured pending, failed or succeeded value"
			}
			return fail(CategoryUnrecognizedValue, reason)
		}
	}
	return out, nil
}

// send builds and sends one request under ctx. The returned wire says how far
// the request got when err is not nil.
func (a *Adapter) send(ctx context.Context, method, u string, body []byte, contentType string, req adapter.Request, withKeys bool) (*http.Response, *wire, error) {
	w := &wire{}
	ctx = httptrace.WithClientTrace(ctx, w.trace())
	var rd io.Reader
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		// Unreachable with a template New accepted; fail as "not sent" all the same.
		return nil, w, errBuild
	}
	// Without GetBody the transport cannot re-send the body by itself. It
	// otherwise silently repeats a request carrying an Idempotency-Key when a
	// reused connection breaks: a second vendor call the ledger never sees.
	hreq.GetBody = nil
	for k, vs := range req.Header {
		hreq.Header[k] = slices.Clone(vs)
	}
	hreq.Header.Set("Accept", "application/json")
	for k, vs := range a.headers { // configured headers win over passed-through ones and the Accept default
		hreq.Header[k] = slices.Clone(vs)
	}
	if rd != nil {
		hreq.Header.Set("Content-Type", contentType)
	}
	if withKeys && req.IdempotencyKey != "" {
		if a.idemHeader != "" {
			hreq.Header.Set(a.idemHeader, req.IdempotencyKey)
		}
		if a.refHeader != "" {
			hreq.Header.Set(a.refHeader, req.IdempotencyKey)
		}
	}
	resp, err := a.client.Do(hreq)
	return resp, w, err
}

var errBuild = errors.New("request could not be built")

// wire records, through httptrace, how far a request got.
type wire struct {
	mu      sync.Mutex
	gotConn bool // a connection was obtained
	reports bool // the transport reported the end of a write attempt
	written bool // a write attempt completed: the vendor may act on it
}

func (w *wire) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) {
			w.mu.Lock()
			w.gotConn = true
			w.mu.Unlock()
		},
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			w.mu.Lock()
			w.reports = true
			if info.Err == nil {
				w.written = true
			}
			w.mu.Unlock()
		},
	}
}

// maybeSent reports whether the vendor may have received the whole request.
// It is true when a write completed, and also when a connection was obtained
// but no write ever reported back: HTTP/2 can return on cancellation while
// the stream is being written, so the request may be on its way. A write that
// failed (or no connection at all) means the vendor cannot have a complete
// request to act on.
func (w *wire) maybeSent() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written || (w.gotConn && !w.reports)
}

// transportFailure classifies an error from Client.Do.
func transportFailure(err error, w *wire) adapter.Result {
	if errors.Is(err, errBuild) || !w.maybeSent() {
		return adapter.Result{Outcome: op.OutcomeRetryable, ErrorCategory: CategoryConnection,
			Error: "request not sent: " + describe(err)}
	}
	cat := CategoryConnection
	if isTimeout(err) {
		cat = CategoryTimeout
	}
	return adapter.Result{Outcome: op.OutcomeUnknown, ErrorCategory: cat,
		Error: "no response after the request was sent: " + describe(err)}
}

// isTimeout reports whether we gave up waiting (deadline, cancellation, or a
// transport timeout such as http.Client.Timeout).
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// describe is a short, fixed-vocabulary cause: never the URL, a header or a body.
func describe(err error) string {
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var opErr *net.OpError
	switch {
	case errors.Is(err, errBuild):
		return errBuild.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return "dns: no such host"
		}
		return "dns lookup failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset by peer"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed by the vendor"
	case errors.As(err, &certErr):
		return "tls: certificate verification failed"
	}
	if isTimeout(err) {
		return "timed out"
	}
	if errors.As(err, &opErr) {
		return "network " + opErr.Op + " failed"
	}
	return "transport error"
}

// parseRetryAfter reads delay-seconds or an HTTP date. Values are capped at
// 24h so a hostile header cannot park an operation indefinitely; garbage is 0.
func parseRetryAfter(v string, now time.Time) time.Duration {
	const ceiling = 24 * time.Hour
	v = strings.TrimSpace(v)
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64(ceiling/time.Second) {
			return ceiling
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), ceiling)
	}
	return 0
}

// drainClose reads a little of what is left of a body before closing it, so
// the connection can go back to the pool instead of being torn down.
func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	_ = body.Close()
}

func readBody(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxResponse+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxResponse {
		return nil, errors.New("response body too large")
	}
	return b, nil
}

// parseJSON decodes a vendor's JSON strictly: one value, valid UTF-8 (never
// patched with U+FFFD), numbers as json.Number, and no key twice in an
// object (encoding/json would keep the last, so {"status":"failed",
// "status":"succeeded"} would read as a success).
func parseJSON(b []byte) (any, error) {
	if !utf8.Valid(b) {
		return nil, errNotJSON
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if msgwire.NoRepeatedKeys(b) {
		// Nearly every answer: decoded at once, without the token walk
		// below, which only a key written with an escape still needs.
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, errNotJSON
		}
		return v, nil
	}
	v, err := jsonValue(dec)
	if err != nil {
		return nil, errNotJSON
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errNotJSON
	}
	return v, nil
}

var errNotJSON = errors.New("not JSON")

// jsonValue reads one value from dec's tokens. encoding/json's scanner
// bounds the nesting depth, and so this recursion.
func jsonValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil // string, json.Number, bool or nil
	}
	switch d {
	case '{':
		m := map[string]any{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string)
			if _, dup := m[k]; dup {
				return nil, errNotJSON
			}
			if m[k], err = jsonValue(dec); err != nil {
				return nil, err
			}
		}
		_, err = dec.Token() // '}'
		return m, err
	case '[':
		a := []any{}
		for dec.More() {
			v, err := jsonValue(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err = dec.Token() // ']'
		return a, err
	}
	return nil, errNotJSON
}

// walk follows path (JSON pointer tokens or dotted-field parts) into doc; nil
// when absent. Array elements are addressed by index.
func walk(doc any, path []string) any {
	v := doc
	for _, tok := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// scalarString renders a JSON string, number or boolean; false otherwise.
func scalarString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}

// vendorCode extracts a vendor's machine error code from an error body
// ({"error":"code"}, {"error":{"code"|"type":…}} or {"code":…}) when it is a
// plain lower-case token. Anything else — which might echo input — is dropped.
func vendorCode(body []byte) string {
	doc, err := parseJSON(body)
	if err != nil {
		return ""
	}
	for _, path := range [][]string{{"error"}, {"error", "code"}, {"error", "type"}, {"code"}} {
		if s, ok := walk(doc, path).(string); ok && safeToken(s) {
			return s
		}
	}
	return ""
}

func safeToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// expand fills the template for req.
func (t *urlTemplate) expand(req adapter.Request) (string, error) {
	var args any
	if t.needsArgs() {
		var err error
		if args, err = parseJSON(req.Args); err != nil {
			return "", errors.New("canonical args are not JSON")
		}
	}
	var b strings.Builder
	for _, p := range t.parts {
		if p.name == "" {
			b.WriteString(p.lit)
			continue
		}
		var v string
		switch {
		case p.path != nil:
			raw := walk(args, p.path)
			s, ok := scalarString(raw)
			if !ok {
				if raw == nil {
					return "", &errMissing{where: "url field", name: p.name, why: "is missing from the args"}
				}
				return "", &errMissing{where: "url field", name: p.name, why: "is not a string, number or boolean"}
			}
			v = s
		case p.name == phIdempotencyKey:
			v = req.IdempotencyKey
		default:
			v = req.OperationID
		}
		if v == "" {
			return "", &errMissing{where: "url field", name: p.name, why: "is empty"}
		}
		if p.query {
			b.WriteString(url.QueryEscape(v))
		} else {
			b.WriteString(url.PathEscape(v))
		}
	}
	return b.String(), nil
}
