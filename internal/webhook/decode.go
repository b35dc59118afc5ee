package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// decodeError is why a payload is refused: a stable reason and a message.
type decodeError struct {
	reason string
	msg    string
}

func (e *decodeError) Error() string { return e.reason + ": " + e.msg }

// decodePayload reads a webhook payload exactly one way, so that what a
// filter in front of opledger makes of it, opledger makes the same: one
// JSON object, nothing after it; valid UTF-8 without unpaired surrogate
// escapes (never repaired into U+FFFD); no NUL anywhere; no key given twice
// in any object; objects and arrays nested at most maxDepth deep. Numbers
// stay json.Number. The result is map[string]any, []any, string,
// json.Number, bool and nil.
func decodePayload(body []byte, maxDepth int) (map[string]any, error) {
	if err := checkText(body); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	d := &payloadDecoder{dec: dec, maxDepth: maxDepth}
	tok, err := dec.Token()
	if err != nil {
		return nil, d.malformed(err)
	}
	if delim, ok := tok.(json.Delim); !ok || delim != '{' {
		return nil, &decodeError{ReasonNotAnObject, "the payload is not a JSON object"}
	}
	v, err := d.object(1)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &decodeError{ReasonMalformedJSON, "data after the JSON object"}
	}
	return v, nil
}

type payloadDecoder struct {
	dec      *json.Decoder
	maxDepth int
}

func (d *payloadDecoder) malformed(err error) error {
	msg := "not valid JSON"
	var se *json.SyntaxError
	if errors.As(err, &se) {
		msg = "not valid JSON at byte " + itoa(se.Offset)
	}
	return &decodeError{ReasonMalformedJSON, msg}
}

func (d *payloadDecoder) object(depth int) (map[string]any, error) {
	if depth > d.maxDepth {
		return nil, &decodeError{ReasonTooDeep, "nested deeper than " + itoa(int64(d.maxDepth))}
	}
	out := map[string]any{}
	for d.dec.More() {
		tok, err := d.dec.Token()
		if err != nil {
			return nil, d.malformed(err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, &decodeError{ReasonMalformedJSON, "an object key is not a string"}
		}
		if _, dup := out[key]; dup {
			return nil, &decodeError{ReasonDuplicateKey, "a key appears twice in one object"}
		}
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		out[key] = v
	}
	if _, err := d.dec.Token(); err != nil { // the closing brace
		return nil, d.malformed(err)
	}
	return out, nil
}

func (d *payloadDecoder) value(depth int) (any, error) {
	tok, err := d.dec.Token()
	if err != nil {
		return nil, d.malformed(err)
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	switch delim {
	case '{':
		return d.object(depth + 1)
	case '[':
		if depth+1 > d.maxDepth {
			return nil, &decodeError{ReasonTooDeep, "nested deeper than " + itoa(int64(d.maxDepth))}
		}
		out := []any{}
		for d.dec.More() {
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		if _, err := d.dec.Token(); err != nil {
			return nil, d.malformed(err)
		}
		return out, nil
	}
	return nil, &decodeError{ReasonMalformedJSON, "unexpected " + string(delim)}
}

// checkText refuses bytes that are not UTF-8, a NUL (raw or escaped) and
// string escapes naming an unpaired UTF-16 surrogate: none can be read
// without changing it.
func checkText(body []byte) error {
	if !utf8.Valid(body) {
		return &decodeError{ReasonInvalidUTF8, "the payload is not valid UTF-8"}
	}
	if bytes.IndexByte(body, 0) >= 0 {
		return &decodeError{ReasonNUL, "the payload holds a NUL byte"}
	}
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' || i+1 >= len(body) {
			continue
		}
		if body[i+1] != 'u' {
			i++ // a one-character escape, maybe \\: skip it
			continue
		}
		r1, ok := hex4(body, i+2)
		if !ok {
			continue // the JSON decoder reports malformed escapes
		}
		switch {
		case r1 == 0:
			return &decodeError{ReasonNUL, "the payload holds an escaped NUL (\\u0000)"}
		case utf16.IsSurrogate(r1) && r1 < 0xdc00:
			r2, ok := rune(0), false
			if i+7 < len(body) && body[i+6] == '\\' && body[i+7] == 'u' {
				r2, ok = hex4(body, i+8)
			}
			if !ok || utf16.DecodeRune(r1, r2) == utf8.RuneError {
				return &decodeError{ReasonInvalidUTF8, "an escape names half of a UTF-16 surrogate pair"}
			}
			i += 11
		case utf16.IsSurrogate(r1):
			return &decodeError{ReasonInvalidUTF8, "an escape names half of a UTF-16 surrogate pair"}
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

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
