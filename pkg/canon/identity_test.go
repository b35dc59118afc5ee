package canon_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/canon"
)

func identitySchema(t testing.TB) *canon.Schema {
	t.Helper()
	s, err := canon.CompileSchema("t", []byte(`{"type":"object","properties":{
		"order_id":{"type":"string"},"to":{"type":"string"},"phone":{"type":"string"},
		"code":{"type":"string"},"note":{"type":"string"},"lc":{"type":"string"}}}`))
	require.NoError(t, err)
	return s
}

func identity(t testing.TB) *canon.Identity {
	t.Helper()
	id, err := canon.NewIdentity([]string{"order_id", "code"}, map[string][]string{
		"to": {"email"}, "phone": {"digits_only"}, "lc": {"email_lowercase"},
	})
	require.NoError(t, err)
	return id
}

func field(t testing.TB, s *canon.Schema, id *canon.Identity, name, value string) (string, error) {
	t.Helper()
	raw, err := json.Marshal(map[string]string{name: value})
	require.NoError(t, err)
	a, err := s.CanonicalizeIdentity(raw, id)
	if err != nil {
		return "", err
	}
	v, _ := a.Field(name)
	return v, nil
}

// Look-alike values of identity fields are one value; values the rules say
// are different stay different.
func TestIdentityRules(t *testing.T) {
	t.Parallel()
	s, id := identitySchema(t), identity(t)
	same := func(name string, want string, inputs ...string) {
		t.Helper()
		for _, in := range inputs {
			got, err := field(t, s, id, name, in)
			require.NoError(t, err, "%q", in)
			require.Equal(t, want, got, "%s %q", name, in)
		}
	}
	same("order_id", "ord_77", "ord_77", "ord_77\u200b", "\ufefford_77", "ord\u00ad_77", "ord_\u202e77", "ord_77\u2060", "ord_7\u200d7", " ord_77 ")
	same("to", "victim@example.com", "victim@example.com", "victim@EXAMPLE.com", "victim@Example.COM\u200b")
	same("to", "Victim@example.com", "Victim@Example.COM", "Victim@example.com") // the local part may be case-sensitive
	same("lc", "victim@example.com", "Victim@Example.COM", "victim@EXAMPLE.com", "VICTIM@example.com")
	same("phone", "15550100000", "+1 (555) 010-0000", "1-555-010-0000", "１５５５０１０００００")

	for name, in := range map[string]string{"order_id": "ord\x0077", "code": "a\nb", "to": "not-an-address", "lc": "a@b@c", "phone": "no digits"} {
		_, err := field(t, s, id, name, in)
		require.ErrorIs(t, err, canon.ErrInvalidArgs, "%s %q", name, in)
	}
	// Fields outside the identity keep their invisible characters: an
	// emoji's joiner in a note is not a look-alike problem.
	got, err := field(t, s, id, "note", "a\u200db")
	require.NoError(t, err)
	require.Equal(t, "a\u200db", got)

	_, err = canon.NewIdentity(nil, map[string][]string{"to": {"emails"}})
	require.ErrorIs(t, err, canon.ErrInvalidSchema)
	require.ErrorContains(t, err, "email_lowercase")
}

// The oracles below restate each rule independently of the code under
// test: what must come out, and when two inputs must stay apart.
func oracleClean(s string) string {
	var b strings.Builder
	for _, r := range s {
		ignorable := unicode.In(r, unicode.Other_Default_Ignorable_Code_Point, unicode.Cf, unicode.Variation_Selector) &&
			!unicode.IsSpace(r) && !(r >= 0xFFF9 && r <= 0xFFFB) && !(r >= 0x13430 && r <= 0x13440) &&
			!unicode.Is(unicode.Prepended_Concatenation_Mark, r)
		if !ignorable {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// FuzzIdentity: normalizing is idempotent (the canonical arguments
// canonicalize to themselves), and two inputs are merged only when the rule
// says they are one: for email, the local parts are equal exactly and the
// domains equal ignoring case; for the plain identity field, the inputs are
// equal once default-ignorables are removed (and NFC and trimming applied).
func FuzzIdentity(f *testing.F) {
	for _, seed := range [][2]string{
		{"victim@example.com", "Victim@Example.COM"}, {"ord_77", "ord_77\u200b"}, {"a@b", "A@b"},
		{"x\ufeffy@d", "xy@D"}, {"\u0600a@b", "a@b"}, {"é@x", "e\u0301@X"},
	} {
		f.Add(seed[0], seed[1])
	}
	s, id := identitySchema(f), identity(f)
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, name := range []string{"order_id", "to", "phone", "lc"} {
			na, errA := field(t, s, id, name, a)
			nb, errB := field(t, s, id, name, b)
			if errA == nil {
				again, err := field(t, s, id, name, na)
				if err != nil || again != na {
					t.Fatalf("%s: not idempotent: %q -> %q -> %q (%v)", name, a, na, again, err)
				}
			}
			if errA != nil || errB != nil || na != nb {
				continue
			}
			ca, cb := strings.TrimSpace(oracleClean(a)), strings.TrimSpace(oracleClean(b))
			switch name {
			case "to":
				la, da, _ := strings.Cut(ca, "@")
				lb, db, _ := strings.Cut(cb, "@")
				if normNFC(la) != normNFC(lb) || !strings.EqualFold(normNFC(da), normNFC(db)) {
					t.Fatalf("email merged %q and %q into %q", a, b, na)
				}
			case "order_id":
				if normNFC(ca) != normNFC(cb) {
					t.Fatalf("identity merged %q and %q into %q", a, b, na)
				}
			}
		}
	})
}

func normNFC(s string) string {
	b, _ := json.Marshal(s)
	out, err := canon.Normalize(b)
	if err != nil {
		return s
	}
	var v string
	_ = json.Unmarshal(out, &v)
	return v
}

// The examples docs/protocol.md gives for each normalizer, as written there,
// and what each normalizer keeps apart when a field does not have it.
func TestIdentityNormalizerExamples(t *testing.T) {
	t.Parallel()
	s, err := canon.CompileSchema("t", []byte(`{"type":"object","properties":{
		"tr":{"type":"string"},"lo":{"type":"string"},"up":{"type":"string"},"wide":{"type":"string"},
		"ph":{"type":"string"},"plain":{"type":"string"}}}`))
	require.NoError(t, err)
	id, err := canon.NewIdentity([]string{"plain"}, map[string][]string{
		"tr": {"trim"}, "lo": {"lowercase"}, "up": {"uppercase"}, "wide": {"nfkc"}, "ph": {"digits_only"},
	})
	require.NoError(t, err)
	for name, ex := range map[string]struct {
		want   string
		inputs []string
	}{
		"tr":    {"ord_77", []string{" ord_77 ", "\tord_77\n"}},
		"lo":    {"ord_77", []string{"ORD_77", "Ord_77"}},
		"up":    {"AB-123", []string{"ab-123", "Ab-123"}},
		"wide":  {"ord_77", []string{"ｏｒｄ＿７７"}},
		"ph":    {"15550100000", []string{"+1 (555) 010-0000", "１５５５０１０００００"}},
		"plain": {"ORD_77", []string{"ORD_77"}},
	} {
		for _, in := range ex.inputs {
			got, err := field(t, s, id, name, in)
			require.NoError(t, err, "%s %q", name, in)
			require.Equal(t, ex.want, got, "%s %q", name, in)
		}
	}
	got, err := field(t, s, id, "wide", "ﬁle_1")
	require.NoError(t, err)
	require.Equal(t, "file_1", got)
	for name, in := range map[string]string{"plain": "ｏｒｄ＿７７"} {
		got, err := field(t, s, id, name, in)
		require.NoError(t, err)
		require.NotEqual(t, "ord_77", got, "without nfkc, full-width letters are other letters")
	}
	got, err = field(t, s, id, "plain", "ord_77")
	require.NoError(t, err)
	require.NotEqual(t, "ORD_77", got, "without lowercase, case makes another value")
	_, err = field(t, s, id, "ph", "no digits")
	require.ErrorIs(t, err, canon.ErrInvalidArgs)
}
