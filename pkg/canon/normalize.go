package canon

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Normalize canonicalizes any JSON document without a schema: it parses
// strictly, applies the schema-independent rules (NFC keys, NFC and trimmed
// string values, canonical numbers) and returns the canonical encoding. The
// top-level value may be of any JSON type.
//
// For an object, Normalize(raw) equals the JSON that Canonicalize returns
// under the schema {}. Normalize is idempotent.
//
// Errors: *FieldError (ErrInvalidArgs).
func Normalize(raw []byte) ([]byte, error) {
	v, err := parse(raw)
	if err != nil {
		return nil, err
	}
	w := walker{}
	v, err = w.value(v, nil, nil)
	if err != nil {
		return nil, err
	}
	return appendJSON(nil, v), nil
}

// normalizeString applies NFC and trims leading and trailing white space
// (Unicode White_Space, as strings.TrimSpace), repeating until stable so the
// result is both NFC and trimmed.
func normalizeString(s string) string {
	for {
		t := strings.TrimSpace(norm.NFC.String(s))
		if t == s {
			return t
		}
		s = t
	}
}
