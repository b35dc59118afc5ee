package canon

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxKeyLen is the longest key, in bytes, that Render and Expand return.
const MaxKeyLen = 255

// ArgsHashField is a computed placeholder: {_args_hash} renders Args.Hash,
// the hash of the whole canonical arguments. It shadows an argument of the
// same name.
const ArgsHashField = "_args_hash"

// EntityVersionField is a placeholder the caller fills in (RenderWith): the
// version of the operation's entity when the intent was accepted, so that
// setting a field back to an earlier value after another change of the
// entity is a new action, not a repeat.
const EntityVersionField = "entity_version"

// Template is a parsed key template such as
// "payment:{order_id}:capture:{amount_cents}:{currency}". It is immutable and
// safe for concurrent use.
type Template struct {
	src    string
	parts  []tmplPart
	fields []string
}

type tmplPart struct {
	text  string // literal text, or the field path of a placeholder
	field bool
}

// ParseTemplate parses a key template. Placeholders are dotted field paths in
// braces. It rejects an empty template, unbalanced or nested braces, an
// empty placeholder or path segment, white space or control characters in a
// placeholder, and two placeholders not separated by literal text containing
// ':' (rendered values never contain a raw ':', so keys stay unambiguous).
//
// A template without placeholders is accepted; it renders the same key for
// every call.
//
// Errors: ErrInvalidTemplate, wrapped with the reason.
func ParseTemplate(tmpl string) (*Template, error) {
	if tmpl == "" {
		return nil, fmt.Errorf("%w: template is empty", ErrInvalidTemplate)
	}
	t := &Template{src: tmpl}
	fail := func(format string, args ...any) (*Template, error) {
		return nil, fmt.Errorf("%w: %q: %s", ErrInvalidTemplate, tmpl, fmt.Sprintf(format, args...))
	}
	lastField := ""  // the placeholder before the current literal, if any
	sinceField := "" // literal text since that placeholder
	for i := 0; i < len(tmpl); {
		switch tmpl[i] {
		case '}':
			return fail("unmatched '}' at byte %d", i)
		case '{':
			end := strings.IndexAny(tmpl[i+1:], "{}")
			if end < 0 || tmpl[i+1+end] == '{' {
				return fail("unclosed '{' at byte %d", i)
			}
			field := tmpl[i+1 : i+1+end]
			if err := checkFieldPath(field); err != nil {
				return fail("placeholder at byte %d: %v", i, err)
			}
			if lastField != "" && !strings.Contains(sinceField, ":") {
				return fail("placeholders {%s} and {%s} must be separated by text containing ':'", lastField, field)
			}
			t.parts = append(t.parts, tmplPart{text: field, field: true})
			if !slices.Contains(t.fields, field) {
				t.fields = append(t.fields, field)
			}
			lastField, sinceField = field, ""
			i += end + 2
		default:
			end := strings.IndexAny(tmpl[i:], "{}")
			if end < 0 {
				end = len(tmpl) - i
			}
			t.parts = append(t.parts, tmplPart{text: tmpl[i : i+end]})
			sinceField += tmpl[i : i+end]
			i += end
		}
	}
	return t, nil
}

func checkFieldPath(field string) error {
	if field == "" {
		return fmt.Errorf("empty placeholder {}")
	}
	for seg := range strings.SplitSeq(field, ".") {
		if seg == "" {
			return fmt.Errorf("empty path segment in {%s}", field)
		}
	}
	for _, r := range field {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("white space or control character in placeholder %s", strconv.QuoteToASCII(field))
		}
	}
	return nil
}

// String returns the template as written.
func (t *Template) String() string { return t.src }

// Fields returns the placeholder paths in order of first appearance, without
// repeats.
func (t *Template) Fields() []string { return append([]string(nil), t.fields...) }

// Render returns the idempotency key for a: the template with each
// placeholder replaced by its canonical scalar (see Args.Field), with
// ':', '{', '}', '%', '/', white space, control and format characters
// percent-encoded, followed by ":v<version>". A key longer than MaxKeyLen
// bytes keeps its longest prefix that fits, cut on a rune boundary, followed
// by "~" and the hex SHA-256 of the whole key, so it is at most MaxKeyLen
// bytes and still unique.
//
// Errors: *FieldError (ErrInvalidArgs) naming a placeholder field that is
// missing, null, an object or an array; ErrInvalidTemplate when version < 1.
func (t *Template) Render(a *Args, version int) (string, error) {
	return t.RenderWith(a, version, nil)
}

// RenderWith is Render with values for placeholders that are not arguments
// (EntityVersionField): given is consulted before the arguments.
func (t *Template) RenderWith(a *Args, version int, given map[string]string) (string, error) {
	if version < 1 {
		return "", fmt.Errorf("%w: %q: version must be at least 1, got %d", ErrInvalidTemplate, t.src, version)
	}
	s, err := t.expand(a, given)
	if err != nil {
		return "", err
	}
	return capKey(s + ":v" + strconv.Itoa(version)), nil
}

// Expand renders the template like Render but without the version suffix:
// for entity ids and dedupe keys, which must not change with a tool's version.
//
// Errors: as Render.
func (t *Template) Expand(a *Args) (string, error) {
	s, err := t.expand(a, nil)
	if err != nil {
		return "", err
	}
	return capKey(s), nil
}

// Literal returns the template's literal text, its placeholders left out.
func (t *Template) Literal() string {
	var b strings.Builder
	for _, p := range t.parts {
		if !p.field {
			b.WriteString(p.text)
		}
	}
	return b.String()
}

// Uses reports whether the template has the placeholder field.
func (t *Template) Uses(field string) bool {
	for _, f := range t.fields {
		if f == field {
			return true
		}
	}
	return false
}

func (t *Template) expand(a *Args, given map[string]string) (string, error) {
	if a == nil {
		return "", &FieldError{Reason: "no arguments to render the key template from"}
	}
	var b strings.Builder
	for _, p := range t.parts {
		if !p.field {
			b.WriteString(p.text)
			continue
		}
		if p.text == ArgsHashField {
			b.WriteString(a.Hash)
			continue
		}
		if v, ok := given[p.text]; ok {
			escapeKeyValue(&b, v)
			continue
		}
		v, ok := a.lookup(p.text)
		if !ok {
			return "", &FieldError{Path: p.text, Reason: "is missing, but the key template " + strconv.Quote(t.src) + " needs it"}
		}
		s, ok := scalarText(v)
		if !ok {
			return "", &FieldError{Path: p.text, Reason: "must be a string, number or boolean for the key template " + strconv.Quote(t.src) + ", got " + typeName(v)}
		}
		escapeKeyValue(&b, s)
	}
	return b.String(), nil
}

const upperHex = "0123456789ABCDEF"

// escapeKeyValue writes s, percent-encoding (as UTF-8 bytes, %XX) the
// characters that would make a key ambiguous or unreadable.
func escapeKeyValue(b *strings.Builder, s string) {
	for _, r := range s {
		if !mustEscape(r) {
			b.WriteRune(r)
			continue
		}
		var buf [utf8.UTFMax]byte
		n := utf8.EncodeRune(buf[:], r)
		for _, c := range buf[:n] {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&0xf])
		}
	}
}

// mustEscape reports whether a value's rune is percent-encoded in a key.
// '/' is among them because it separates a tenant from its key
// (<tenant>/<key>, wire.TenantScope): were a value's '/' kept, the default
// tenant's key for customer "acme/c1" would be tenant acme's key for "c1".
func mustEscape(r rune) bool {
	switch r {
	case ':', '{', '}', '%', '/':
		return true
	}
	return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}

// CapKey bounds a key built from a rendered one (a tenant prefix added):
// at most MaxKeyLen bytes, as Render bounds its keys.
func CapKey(key string) string { return capKey(key) }

// capKey shortens a key longer than MaxKeyLen: the longest prefix that leaves
// room for "~" and 64 hex digits of the SHA-256 of the whole key, cut on a
// rune boundary and not inside a %XX escape.
func capKey(key string) string {
	if len(key) <= MaxKeyLen {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	tail := "~" + hex.EncodeToString(sum[:])
	prefix := cutRunes(key, MaxKeyLen-len(tail))
	if i := strings.LastIndexByte(prefix, '%'); i >= 0 && i >= len(prefix)-2 {
		prefix = prefix[:i]
	}
	return prefix + tail
}
