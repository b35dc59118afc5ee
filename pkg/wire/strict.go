package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/opledger/opledger/pkg/op"
)

// Messages are read exactly once, one way: whatever a filter in front of
// opledger makes of an intent, opledger must make the same. Go's
// encoding/json matches field names case-insensitively, keeps the last of a
// repeated key and replaces invalid UTF-8 (raw, or an unpaired surrogate
// escape) with U+FFFD; strictObject refuses all of that before decoding.

// errStrict explains why a message is not strict JSON; reason is its
// stable name (RefusalReason).
type errStrict struct{ msg, reason string }

func (e *errStrict) Error() string { return e.msg }

// checkUTF8 refuses bytes that are not UTF-8 and string escapes that name
// an unpaired UTF-16 surrogate: neither can be read without replacing it.
func checkUTF8(body []byte) error {
	if !utf8.Valid(body) {
		i := 0
		for i < len(body) {
			r, size := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			i += size
		}
		return &errStrict{fmt.Sprintf("invalid UTF-8 at byte %d", i), ReasonInvalidUTF8}
	}
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		if i+1 < len(body) && body[i+1] != 'u' {
			i++ // an escape of one character: skip it (it may be \\)
			continue
		}
		r1, ok := hex4(body, i+2)
		if !ok {
			continue // the JSON decoder reports malformed escapes
		}
		switch {
		case utf16.IsSurrogate(r1) && r1 < 0xdc00:
			r2, ok := rune(0), false
			if i+7 < len(body) && body[i+6] == '\\' && body[i+7] == 'u' {
				r2, ok = hex4(body, i+8)
			}
			if !ok || utf16.DecodeRune(r1, r2) == utf8.RuneError {
				return &errStrict{fmt.Sprintf("unpaired UTF-16 surrogate escape at byte %d", i), ReasonInvalidUTF8}
			}
			i += 11
		case utf16.IsSurrogate(r1):
			return &errStrict{fmt.Sprintf("unpaired UTF-16 surrogate escape at byte %d", i), ReasonInvalidUTF8}
		default:
			i += 5
		}
	}
	return nil
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// strictObject checks that body is one JSON object whose keys are exactly
// (case included) names in fields, each at most once; nested objects named
// in nested are checked the same way against their own field lists (a nil
// list allows any key, still without repeats). Nothing may follow the
// object.
func strictObject(body []byte, fields []string, nested map[string][]string) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := checkObject(dec, "", fields, nested); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return &errStrict{"data after the JSON object", ReasonNotOneObject}
	}
	return nil
}

func checkObject(dec *json.Decoder, path string, fields []string, nested map[string][]string) error {
	tok, err := dec.Token()
	if err != nil {
		return &errStrict{"not valid JSON: " + Clip(err.Error()), ReasonNotJSON}
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		if path == "" {
			return &errStrict{"not a JSON object", ReasonNotObject}
		}
		return &errStrict{path + " must be an object", ReasonNotObject}
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return &errStrict{"not valid JSON: " + Clip(err.Error()), ReasonNotJSON}
		}
		key, _ := tok.(string)
		name := key
		if path != "" {
			name = path + "." + key
		}
		if seen[key] {
			return &errStrict{fmt.Sprintf("field %q appears twice", Clip(name)), ReasonDuplicateField}
		}
		seen[key] = true
		if fields != nil && !contains(fields, key) {
			if k := foldMatch(fields, key); k != "" {
				return &errStrict{fmt.Sprintf("unknown field %q (field names are case-sensitive: %q)", Clip(name), k), ReasonUnknownField}
			}
			return &errStrict{fmt.Sprintf("unknown field %q", Clip(name)), ReasonUnknownField}
		}
		if sub, ok := nested[key]; ok && path == "" {
			if err := checkObject(dec, name, sub, nil); err != nil {
				return err
			}
			continue
		}
		if err := skipValue(dec); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return &errStrict{"not valid JSON: " + Clip(err.Error()), ReasonNotJSON}
	}
	return nil
}

// skipValue reads one value, refusing repeated keys in any object inside it.
func skipValue(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return &errStrict{"not valid JSON: " + Clip(err.Error()), ReasonNotJSON}
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return &errStrict{"not valid JSON: " + Clip(err.Error()), ReasonNotJSON}
			}
			key, _ := k.(string)
			if seen[key] {
				return &errStrict{fmt.Sprintf("field %q appears twice in a nested object", Clip(key)), ReasonDuplicateField}
			}
			seen[key] = true
			if err := skipValue(dec); err != nil {
				return err
			}
		}
	case '[':
		for dec.More() {
			if err := skipValue(dec); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil {
		return &errStrict{"not valid JSON: " + Clip(err.Error()), ReasonNotJSON}
	}
	return nil
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// foldMatch returns the field that s matches case-insensitively, or "".
func foldMatch(fields []string, s string) string {
	for _, f := range fields {
		if bytes.EqualFold([]byte(f), []byte(s)) {
			return f
		}
	}
	return ""
}

// ValidText reports whether s can be stored and echoed as is: at most max
// bytes of valid UTF-8 without control characters.
func ValidText(s string, max int) bool {
	if len(s) > max || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// decodeStrict reads body into v after strictObject: exact field names, no
// repeats, no unknown fields, valid UTF-8 without unpaired surrogates.
func decodeStrict(body []byte, v any, fields []string, nested map[string][]string) error {
	if err := checkUTF8(body); err != nil {
		return fmt.Errorf("%w: %w", err, op.ErrInvalid)
	}
	if !quickObject(body, fields, nested) {
		if err := strictObject(body, fields, nested); err != nil {
			return fmt.Errorf("%w: %w", err, op.ErrInvalid)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return refuse(ReasonWrongType, fmt.Errorf("%s: %w", shortJSONError(err), op.ErrInvalid))
	}
	return nil
}

// Field lists of the messages, as their JSON Schemas have them.
var (
	intentFields  = []string{"spec", "event_id", "workflow_id", "run_id", "tool", "intent", "args", "actor", "correlation", "dedupe_override"}
	intentNested  = map[string][]string{"actor": {"type", "id"}, "correlation": nil, "dedupe_override": {"reason"}}
	commandFields = []string{"spec", "kind", "operation_id", "tool", "idempotency_key", "lease_epoch", "workflow_id", "event_id", "state"}
)

// DecodeCommand reads a command strictly. Errors wrap op.ErrInvalid.
func DecodeCommand(body []byte) (*Command, error) {
	var c Command
	if err := decodeStrict(body, &c, commandFields, nil); err != nil {
		return nil, fmt.Errorf("command: %w", err)
	}
	if c.Spec != SpecCommand || c.OperationID == "" || !ValidID(c.OperationID) {
		return nil, refuse(ReasonCommandNotCommand, fmt.Errorf("command: not an %s with an operation id: %w", SpecCommand, op.ErrInvalid))
	}
	return &c, nil
}
