package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"unicode/utf8"

	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Stable reasons of a refused intent request: the "reason" of its error
// body, for programs (the message, for people, may change; these do not).
const (
	ReasonTooLarge       = "too_large"       // the body is over 1 MiB
	ReasonInvalidUTF8    = "invalid_utf8"    // bytes or \u escapes that are not UTF-8
	ReasonNotJSON        = "not_json"        // a JSON syntax error
	ReasonNotObject      = "not_object"      // the body, or a field that must be one, is not an object
	ReasonNotOneObject   = "not_one_object"  // something but white space follows the object
	ReasonDuplicateField = "duplicate_field" // a key given twice, at any depth
	ReasonUnknownField   = "unknown_field"   // a key the intent does not have (case included)
	ReasonInvalidIntent  = "invalid_intent"  // a field of the wrong type or out of bounds (spec, ids, tool, …)
	ReasonActorMismatch  = "actor_mismatch"  // actor names someone else than the token's agent
	ReasonIntentsFull    = "intents_full"    // the INTENTS stream is full: not stored, send it again later
	ReasonInvalidQuery   = "invalid_query"   // a query parameter unknown, repeated or out of bounds
)

// reasonError is a refused request with its stable reason.
type reasonError struct {
	reason string
	err    error
}

func (e *reasonError) Error() string { return e.err.Error() }
func (e *reasonError) Unwrap() error { return e.err }

func withReason(reason string, err error) error { return &reasonError{reason: reason, err: err} }

// maxIntentBody bounds POST /v1/intents: the protocol's bound on an intent.
const maxIntentBody = wire.MaxIntentLen

// intentFields and intentNested are the intent's fields as
// schema/wire/intent.v1.json has them (a test keeps them equal).
var (
	intentFields = []string{"spec", "event_id", "workflow_id", "run_id", "tool", "intent", "args", "actor", "correlation", "dedupe_override"}
	intentNested = map[string][]string{"actor": {"type", "id"}, "correlation": nil, "dedupe_override": {"reason"}}
)

// DecodeIntentBody reads the body of POST /v1/intents: the wire intent of
// docs/protocol.md, read the one way pkg/wire reads intents from NATS
// (wire.DecodeIntent: exact field names, each once at any depth, no unknown
// fields, UTF-8 without unpaired surrogate escapes, bounded text, nothing
// after the object, at most 1 MiB), so that whatever a proxy in front of
// the API makes of a body, the API makes the same or refuses it.
//
// Errors carry one of the Reason constants (IntentBodyReason) and wrap
// op.ErrInvalid, or errTooLarge (413) for a body over 1 MiB.
func DecodeIntentBody(body []byte) (*wire.Intent, error) {
	if len(body) > maxIntentBody {
		return nil, withReason(ReasonTooLarge, fmt.Errorf("the body is larger than %d bytes: %w", maxIntentBody, errTooLarge))
	}
	in, err := wire.DecodeIntent("", "", body)
	if err != nil {
		return nil, withReason(refusal(body), fmt.Errorf("body: %w", err))
	}
	return in, nil
}

// IntentBodyReason is the stable reason of a DecodeIntentBody error, or ""
// for an error that carries none.
func IntentBodyReason(err error) string {
	var r *reasonError
	if errors.As(err, &r) {
		return r.reason
	}
	return ""
}

// refusal says why wire.DecodeIntent refused body. It reads the body in
// DecodeIntent's order (UTF-8, then the object token by token, then what
// follows it), so the reason is the cause its message names; what passes
// every check here failed on a field's type or bounds.
func refusal(body []byte) string {
	if !utf8.Valid(body) || loneSurrogate(body) {
		return ReasonInvalidUTF8
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if r := refusalObject(dec, intentFields, intentNested, true); r != "" {
		return r
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ReasonNotOneObject
	}
	return ReasonInvalidIntent
}

// refusalObject reads one object whose keys must be in fields (nil: any),
// descending into the nested objects of the top level.
func refusalObject(dec *json.Decoder, fields []string, nested map[string][]string, top bool) string {
	tok, err := dec.Token()
	if err != nil {
		return ReasonNotJSON
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return ReasonNotObject
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ReasonNotJSON
		}
		key, _ := tok.(string)
		if seen[key] {
			return ReasonDuplicateField
		}
		seen[key] = true
		if fields != nil && !slices.Contains(fields, key) {
			return ReasonUnknownField
		}
		if sub, ok := nested[key]; ok && top {
			if r := refusalObject(dec, sub, nil, false); r != "" {
				return r
			}
			continue
		}
		if r := refusalValue(dec); r != "" {
			return r
		}
	}
	if _, err := dec.Token(); err != nil {
		return ReasonNotJSON
	}
	return ""
}

// refusalValue reads one value, refusing repeated keys in any object in it.
func refusalValue(dec *json.Decoder) string {
	tok, err := dec.Token()
	if err != nil {
		return ReasonNotJSON
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return ""
	}
	switch d {
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return ReasonNotJSON
			}
			key, _ := k.(string)
			if seen[key] {
				return ReasonDuplicateField
			}
			seen[key] = true
			if r := refusalValue(dec); r != "" {
				return r
			}
		}
	case '[':
		for dec.More() {
			if r := refusalValue(dec); r != "" {
				return r
			}
		}
	}
	if _, err := dec.Token(); err != nil {
		return ReasonNotJSON
	}
	return ""
}

// invalidQuery is a refused query parameter.
func invalidQuery(format string, a ...any) error {
	return withReason(ReasonInvalidQuery, fmt.Errorf(format+": %w", append(a, op.ErrInvalid)...))
}
