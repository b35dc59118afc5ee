package canon

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/opledger/opledger/pkg/op"
)

// Sentinel errors. Callers test with errors.Is. Each also matches
// op.ErrInvalid, the domain's class for rejected input.
var (
	// ErrInvalidArgs: a JSON document or a tool call's arguments were rejected:
	// malformed or non-strict JSON, a schema violation, a value that cannot be
	// canonicalized, or a field an idempotency key needs is missing. Returned
	// as *FieldError.
	ErrInvalidArgs error = &sentinel{"invalid arguments"}
	// ErrInvalidSchema: CompileSchema rejected a schema.
	ErrInvalidSchema error = &sentinel{"invalid schema"}
	// ErrInvalidTemplate: ParseTemplate rejected a key template, or Render was
	// called with a version below 1.
	ErrInvalidTemplate error = &sentinel{"invalid key template"}
)

// sentinel is a package error that is also an op.ErrInvalid.
type sentinel struct{ msg string }

func (e *sentinel) Error() string { return e.msg }

// Unwrap makes errors.Is(err, op.ErrInvalid) true.
func (e *sentinel) Unwrap() error { return op.ErrInvalid }

// FieldError says which argument was rejected and why. Its message is safe to
// log and to show to the model: it never contains a string value longer than
// 32 bytes, nor the value of a field that failed a pattern or format check.
type FieldError struct {
	// Path is the dotted path of the field ("customer.id", "items.0.sku"),
	// "" for the arguments as a whole. Segments that are not plain names are
	// quoted; very long ones are shortened.
	Path string
	// Reason says in plain words what is wrong.
	Reason string
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return "args: " + e.Reason
	}
	return "args." + e.Path + ": " + e.Reason
}

// Unwrap makes errors.Is(err, ErrInvalidArgs) true.
func (e *FieldError) Unwrap() error { return ErrInvalidArgs }

func fieldErr(path []string, reason string) *FieldError {
	return &FieldError{Path: formatPath(path), Reason: reason}
}

// maxPathSegments is the most path segments an error message shows.
const maxPathSegments = 16

// maxShown is the longest string value (in bytes) an error message repeats.
const maxShown = 32

// formatPath joins path segments with dots, quoting segments that are not
// plain names so the path stays readable and unambiguous enough for humans.
func formatPath(path []string) string {
	var b strings.Builder
	for i, seg := range path {
		// A pathologically deep path keeps its first and last segments.
		if len(path) > maxPathSegments && i >= maxPathSegments/2 && i < len(path)-maxPathSegments/2 {
			if i == maxPathSegments/2 {
				b.WriteString(".…")
			}
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		if len(seg) > 64 {
			seg = cutRunes(seg, 60) + "…"
		}
		if plainSegment(seg) {
			b.WriteString(seg)
		} else {
			b.WriteString(strconv.Quote(seg))
		}
	}
	return b.String()
}

func plainSegment(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r == '.' || r == '"' || r == '\\' || r <= ' ' || r == 0x7f || r == utf8.RuneError {
			return false
		}
	}
	return true
}

// cutRunes returns the longest prefix of s of at most n bytes that ends on a
// rune boundary.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// show describes a scalar value for an error message without leaking long
// strings: short strings are quoted, long ones are only measured.
func show(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case string:
		if len(v) > maxShown {
			return "a string of " + strconv.Itoa(utf8.RuneCountInString(v)) + " characters"
		}
		return strconv.Quote(v)
	case Number:
		if len(v) > maxShown {
			return "a number of " + strconv.Itoa(len(v)) + " characters"
		}
		return string(v)
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return "a value"
}

// typeName is the JSON type of a decoded value, with its article.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case Number:
		return "a number"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return "an unknown type"
}
