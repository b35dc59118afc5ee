package wire

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/opledger/opledger/pkg/op"
)

// ReadJSON decodes a message opledger sends (a result, an API answer) into
// v the one way, as a reader that tolerates additions must: unknown fields
// are ignored (within a spec, changes are additive), but every field v
// knows is matched exactly, case included, and a key that matches one only
// ignoring case ("STATUS", "Final") is refused rather than taken for it;
// no key appears twice in any object; the bytes are UTF-8 without escapes
// of unpaired surrogates; nothing follows the value. encoding/json alone
// would match names case-insensitively, keep the last repeat and replace
// invalid UTF-8 with U+FFFD, so that two readers could see two messages.
//
// Errors wrap op.ErrInvalid.
func ReadJSON(data []byte, v any) error {
	if err := checkUTF8(data); err != nil {
		return fmt.Errorf("%w: %w", err, op.ErrInvalid)
	}
	if !quickValue(data, reflect.TypeOf(v)) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := checkValue(dec, reflect.TypeOf(v), ""); err != nil {
			return fmt.Errorf("%w: %w", err, op.ErrInvalid)
		}
		if _, err := dec.Token(); err != io.EOF {
			return fmt.Errorf("data after the JSON value: %w", op.ErrInvalid)
		}
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", shortJSONError(err), op.ErrInvalid)
	}
	return nil
}

// DecodeResult reads a result message with ReadJSON: a message that is not
// opledger.result.v1 is refused. Errors wrap op.ErrInvalid.
func DecodeResult(body []byte) (*Result, error) {
	var r Result
	if err := ReadJSON(body, &r); err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	if r.Spec != SpecResult {
		return nil, fmt.Errorf("result: spec must be %q, got %q: %w", SpecResult, Clip(r.Spec), op.ErrInvalid)
	}
	return &r, nil
}

var (
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// checkValue reads one value from dec, checking the keys of every object in
// it against the Go type t it will be decoded into (nil: any keys).
func checkValue(dec *json.Decoder, t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && t != rawMessageType && (reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshaler)) {
		t = nil // decodes itself (time.Time): only repeated keys are checked
	}
	if t == rawMessageType {
		t = nil
	}
	var fields map[string]reflect.Type
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = jsonFields(t)
		case reflect.Map, reflect.Slice, reflect.Array:
			elem = t.Elem()
		}
	}
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
			sub := elem
			if fields != nil {
				var known bool
				if sub, known = fields[key]; !known {
					for f := range fields {
						if strings.EqualFold(f, key) {
							return &errStrict{fmt.Sprintf("unknown field %q (field names are case-sensitive: %q)", Clip(name), f), ReasonUnknownField}
						}
					}
				}
			}
			if err := checkValue(dec, sub, name); err != nil {
				return err
			}
		}
	case '[':
		for i := 0; dec.More(); i++ {
			if err := checkValue(dec, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil {
		return &errStrict{"not valid JSON: " + Clip(err.Error()), ReasonNotJSON}
	}
	return nil
}

// jsonFields maps the JSON names of struct t's fields, promoted fields of
// embedded structs included (a shallower field shadows a deeper one, as in
// encoding/json), to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				embedded = append(embedded, ft)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	for _, et := range embedded {
		for name, ft := range jsonFields(et) {
			if _, shadowed := out[name]; !shadowed {
				out[name] = ft
			}
		}
	}
	return out
}

// CheckHeaders refuses the headers of an intent when a name or a value is
// not valid UTF-8: like the body's bytes, a header is read one way or not
// at all, never with replacement characters. A header that is valid UTF-8
// but malformed for its purpose (a traceparent that is not W3C trace
// context) is not refused here; its reader decides (a malformed traceparent
// starts a new trace, as W3C Trace Context says). Errors wrap op.ErrInvalid.
func CheckHeaders(h map[string]string) error {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		switch {
		case !utf8.ValidString(k):
			return refuse(ReasonBadHeader, fmt.Errorf("a header name is not valid UTF-8: %w", op.ErrInvalid))
		case !utf8.ValidString(h[k]):
			return refuse(ReasonBadHeader, fmt.Errorf("header %s is not valid UTF-8: %w", Clip(k), op.ErrInvalid))
		}
	}
	return nil
}
