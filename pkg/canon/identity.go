package canon

import (
	"fmt"
	"sort"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// Identity fields are the argument fields a tool's identity is made of: the
// fields its key, entity and dedupe templates name, and any the registry
// gives normalizers. Look-alike values of an identity field must make one
// action, so on top of the rules every string gets (NFC, trimmed), an
// identity field's value
//
//   - is refused if it holds a control character (U+0000–U+001F,
//     U+007F–U+009F): it is garbage, not a look-alike;
//   - loses every default-ignorable code point (Unicode's
//     Default_Ignorable_Code_Point: zero-width space and joiners, the byte
//     order mark, soft hyphen, bidirectional controls, variation selectors,
//     …): "ord_77", "ord_77\u200b" and "\ufefford_77" are one order;
//   - then goes through the field's normalizers, in order.
//
// Normalizers (each idempotent; see NormalizerNames):
//
//	trim             leading and trailing white space (every string gets it anyway)
//	lowercase        Unicode lower case: "ORD_77" and "ord_77" are one
//	uppercase        Unicode upper case
//	digits_only      keeps the decimal digits 0–9 (after NFKC, so full-width
//	                 digits count): "+1 (555) 010-0000" is "15550100000";
//	                 a value without a digit is refused
//	email            an address local@domain: the domain in lower case, the
//	                 local part as written (RFC 5321: it may be case-sensitive)
//	email_lowercase  an address with the whole of it in lower case, for
//	                 providers whose mailboxes ignore case (most do)
//	nfkc             Unicode compatibility normalization (full-width letters,
//	                 ligatures): use only where such variants mean the same
//
// email and email_lowercase refuse a value that is not one '@' between a
// non-empty local part and a domain without white space.
//
// Identity normalization changes the canonical arguments themselves, so the
// vendor receives the normalized value and two look-alike calls have equal
// arguments (duplicate_operation, not conflict).
type Identity struct {
	fields map[string][]normalizer
}

type normalizer struct {
	name string
	fn   func(string) (string, error)
}

var normalizers = map[string]func(string) (string, error){
	"trim":            func(s string) (string, error) { return strings.TrimSpace(s), nil },
	"lowercase":       func(s string) (string, error) { return strings.ToLower(s), nil },
	"uppercase":       func(s string) (string, error) { return strings.ToUpper(s), nil },
	"digits_only":     digitsOnly,
	"email":           func(s string) (string, error) { return email(s, false) },
	"email_lowercase": func(s string) (string, error) { return email(s, true) },
	"nfkc":            func(s string) (string, error) { return norm.NFKC.String(s), nil },
}

// NormalizerNames lists the normalizers a registry may name.
func NormalizerNames() []string {
	names := make([]string, 0, len(normalizers))
	for n := range normalizers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewIdentity compiles the identity of a tool: the identity fields (dotted
// paths, as templates name them) and, for some, normalizers by name. A path
// in normalize counts as an identity field too.
//
// Errors: ErrInvalidSchema naming an unknown normalizer.
func NewIdentity(fields []string, normalize map[string][]string) (*Identity, error) {
	id := &Identity{fields: map[string][]normalizer{}}
	for _, f := range fields {
		id.fields[f] = nil
	}
	for f, names := range normalize {
		var chain []normalizer
		for _, n := range names {
			fn, ok := normalizers[n]
			if !ok {
				return nil, fmt.Errorf("%w: field %s: unknown normalizer %q (have %s)", ErrInvalidSchema, f, n, strings.Join(NormalizerNames(), ", "))
			}
			chain = append(chain, normalizer{name: n, fn: fn})
		}
		id.fields[f] = chain
	}
	return id, nil
}

// normalize applies the identity rules to the value at path, if path is an
// identity field.
func (id *Identity) normalize(s string, path []string) (string, error) {
	if id == nil {
		return s, nil
	}
	chain, ok := id.fields[strings.Join(path, ".")]
	if !ok {
		return s, nil
	}
	s, err := CleanIdentity(s)
	if err != nil {
		return "", fieldErr(path, err.Error())
	}
	for _, n := range chain {
		if s, err = n.fn(s); err != nil {
			return "", fieldErr(path, err.Error())
		}
		s = normalizeString(s)
	}
	return s, nil
}

// CleanIdentity applies the rules every identity field gets: control
// characters are refused, default-ignorable code points removed, and the
// result put in NFC and trimmed.
func CleanIdentity(s string) (string, error) {
	for _, r := range s {
		if unicode.IsControl(r) {
			return "", fmt.Errorf("contains a control character (%U); an identifier cannot hold one", r)
		}
	}
	if strings.IndexFunc(s, DefaultIgnorable) >= 0 {
		s = strings.Map(func(r rune) rune {
			if DefaultIgnorable(r) {
				return -1
			}
			return r
		}, s)
	}
	return normalizeString(s), nil
}

// DefaultIgnorable reports whether r has Unicode's derived property
// Default_Ignorable_Code_Point: Other_Default_Ignorable_Code_Point, format
// characters (Cf) and variation selectors, but not white space, the
// interlinear annotation characters U+FFF9–U+FFFB, the Egyptian format
// controls U+13430–U+13440, nor the prepended concatenation marks.
func DefaultIgnorable(r rune) bool {
	if !unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) && !unicode.Is(unicode.Cf, r) && !unicode.Is(unicode.Variation_Selector, r) {
		return false
	}
	switch {
	case unicode.IsSpace(r),
		r >= 0xFFF9 && r <= 0xFFFB,
		r >= 0x13430 && r <= 0x13440,
		unicode.Is(unicode.Prepended_Concatenation_Mark, r):
		return false
	}
	return true
}

func digitsOnly(s string) (string, error) {
	var b strings.Builder
	for _, r := range norm.NFKC.String(s) {
		if r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "", fmt.Errorf("has no digit (normalizer digits_only)")
	}
	return b.String(), nil
}

func email(s string, lowerLocal bool) (string, error) {
	at := strings.LastIndexByte(s, '@')
	if at <= 0 || at == len(s)-1 || strings.Count(s, "@") != 1 || strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		return "", fmt.Errorf("is not an email address of the form local@domain")
	}
	local, domain := s[:at], strings.ToLower(s[at+1:])
	if lowerLocal {
		local = strings.ToLower(local)
	}
	return local + "@" + domain, nil
}
