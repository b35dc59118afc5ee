package canon_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/canon"
)

func TestNormalizeRejectsNonStrictJSON(t *testing.T) {
	t.Parallel()

	for name, tc := range map[string]struct {
		raw, path, reason string
	}{
		"empty":                 {``, "", "invalid JSON: unexpected end of input"},
		"only space":            {"  \n", "", "invalid JSON: unexpected end of input"},
		"duplicate top-level":   {`{"a":1,"b":2,"a":1}`, "a", "duplicate key"},
		"duplicate nested":      {`{"customer":{"id":"x","name":"n","id":"x"}}`, "customer.id", "duplicate key"},
		"duplicate in array":    {`{"items":[{"sku":1},{"sku":1,"sku":2}]}`, "items.1.sku", "duplicate key"},
		"duplicate after NFC":   {`{"caf\u00e9":1,"cafe\u0301":2}`, "café", "duplicate key (keys are compared after Unicode NFC normalization)"},
		"duplicate via escape":  {`{"a":1,"\u0061":2}`, "a", "duplicate key"},
		"trailing data":         {`{"a":1} {"a":2}`, "", "invalid JSON: unexpected data after the JSON value at byte 8"},
		"trailing garbage":      {`{"a":1}x`, "", "invalid JSON: unexpected data after the JSON value at byte 7"},
		"trailing comma":        {`{"a":1,}`, "", `invalid JSON: unexpected character '}' at byte 7`},
		"array trailing comma":  {`{"a":[1,]}`, "a.1", `invalid JSON: unexpected character ']' at byte 8`},
		"invalid UTF-8":         {"{\"a\":\"\xff\"}", "a", "invalid JSON: invalid UTF-8 at byte 6"},
		"invalid UTF-8 in key":  {"{\"\xc3\x28\":1}", "", "invalid JSON: invalid UTF-8 at byte 2"},
		"UTF-8 surrogate":       {"[\"\xed\xa0\x80\"]", "0", "invalid JSON: invalid UTF-8 at byte 2"},
		"overlong UTF-8":        {"[\"\xc0\xaf\"]", "0", "invalid JSON: invalid UTF-8 at byte 2"},
		"lone high surrogate":   {`["\ud83d"]`, "0", "invalid JSON: unpaired UTF-16 surrogate escape at byte 2"},
		"lone low surrogate":    {`["\ude00x"]`, "0", "invalid JSON: unpaired UTF-16 surrogate escape at byte 2"},
		"reversed surrogates":   {`["\ude00\ud83d"]`, "0", "invalid JSON: unpaired UTF-16 surrogate escape at byte 2"},
		"raw control character": {"[\"a\tb\"]", "0", "invalid JSON: unescaped control character 0x09 in string at byte 3"},
		"bad escape":            {`["\x"]`, "0", "invalid JSON: invalid escape at byte 2"},
		"short unicode escape":  {`["\u12"]`, "0", "invalid JSON: invalid \\u escape at byte 2"},
		"unterminated string":   {`["abc`, "0", "invalid JSON: unterminated string"},
		"leading zero":          {`[01]`, "", `invalid JSON: unexpected character '1' at byte 2`},
		"leading plus":          {`[+1]`, "0", `invalid JSON: unexpected character '+' at byte 1`},
		"bare fraction":         {`[.5]`, "0", `invalid JSON: unexpected character '.' at byte 1`},
		"empty fraction":        {`[1.]`, "0", "invalid JSON: invalid number at byte 1"},
		"empty exponent":        {`[1e]`, "0", "invalid JSON: invalid number at byte 1"},
		"NaN":                   {`[NaN]`, "0", `invalid JSON: unexpected character 'N' at byte 1`},
		"Infinity":              {`[-Infinity]`, "0", "invalid JSON: invalid number at byte 1"},
		"single quotes":         {`{'a':1}`, "", `invalid JSON: unexpected character '\'' at byte 1`},
		"comment":               {`{"a":1 /* x */}`, "", `invalid JSON: unexpected character '/' at byte 7`},
		"BOM":                   {"\ufeff{}", "", "invalid JSON: unexpected byte 0xef at byte 0"},
		"bad literal":           {`[tru]`, "0", "invalid JSON: invalid literal at byte 1"},
		"missing colon":         {`{"a" 1}`, "a", `invalid JSON: unexpected character '1' at byte 5`},
		"non-string key":        {`{1:2}`, "", `invalid JSON: unexpected character '1' at byte 1`},
		"number out of range":   {`[1e309]`, "0", "is outside the range of a 64-bit float, got 1e309"},
		"number underflow":      {`[1e-400]`, "0", "is outside the range of a 64-bit float, got 1e-400"},
	} {
		_, err := canon.Normalize([]byte(tc.raw))
		fe := fieldError(t, err, tc.path)
		if tc.reason != "" {
			require.Equal(t, tc.reason, fe.Reason, name)
		}
	}
}

func TestNormalizeDepthLimit(t *testing.T) {
	t.Parallel()

	ok := strings.Repeat("[", canon.MaxDepth) + strings.Repeat("]", canon.MaxDepth)
	out, err := canon.Normalize([]byte(ok))
	require.NoError(t, err)
	require.Equal(t, ok, string(out))

	deep := strings.Repeat(`{"a":`, canon.MaxDepth+1) + "1" + strings.Repeat("}", canon.MaxDepth+1)
	_, err = canon.Normalize([]byte(deep))
	require.ErrorIs(t, err, canon.ErrInvalidArgs)
	require.ErrorContains(t, err, "nesting deeper than 256 levels")
}

func TestNormalizeCanonicalOutput(t *testing.T) {
	t.Parallel()

	for in, want := range map[string]string{
		// RFC 8785 section 3.2.2 sample (numbers, literals, string escaping).
		`{
		  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
		  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
		  "literals": [null, true, false]
		}`: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		// Key order is by UTF-16 code units: U+1F600 (D83D DE00) sorts
		// before U+FF21, unlike in UTF-8 byte order.
		`{"\uff21":6,"\ud83d\ude00":5,"\u20ac":4,"\u00f6":3,"\u0080":2,"1":1,"\r":0}`: "{\"\\r\":0,\"1\":1,\"\u0080\":2,\"ö\":3,\"€\":4,\"😀\":5,\"Ａ\":6}",
		`{"b":1,"a":{"d":[3,{"z":1,"y":2}],"c":null}}`:                                `{"a":{"c":null,"d":[3,{"y":2,"z":1}]},"b":1}`,
		// Only '"', '\' and controls are escaped; short forms where they exist.
		`["\u0000\u0001\u0008\u0009\u000a\u000b\u000c\u000d\u001f\u0020\u007f"]`: `["\u0000\u0001\b\t\n\u000b\f\r\u001f ` + "\u007f" + `"]`,
		`["<a href=\"x\">&amp;</a>", "\u2028\u2029", "\/"]`:                      "[\"<a href=\\\"x\\\">&amp;</a>\",\"\",\"/\"]",
		`["x\u2028", "\u00e9", "\u00C9"]`:                                        `["x","é","É"]`,
		// NFC applies to composition exclusions too.
		`{"\ufb33":"\ufb33"}`: "{\"\u05d3\u05bc\":\"\u05d3\u05bc\"}",
		// Scalars at the top level.
		`  "  padded  " `: `"padded"`,
		`-0`:              `0`,
		`1.0`:             `1`,
		`true`:            `true`,
		`null`:            `null`,
		`{}`:              `{}`,
		`[]`:              `[]`,
		`[12345678901234567890123, -12345678901234567890123.0, 1.5e300]`: `[12345678901234567890123,-1.2345678901234568e+22,1.5e+300]`,
	} {
		out, err := canon.Normalize([]byte(in))
		require.NoError(t, err, in)
		require.Equal(t, want, string(out), in)
		again, err := canon.Normalize(out)
		require.NoError(t, err)
		require.Equal(t, string(out), string(again), in)
	}
}

func TestNormalizeMatchesEmptySchema(t *testing.T) {
	t.Parallel()

	s, err := canon.CompileSchema("anything", []byte(`{}`))
	require.NoError(t, err)
	for _, raw := range []string{
		`{"b":[1.50,"  x "],"a":{"e\u0301":-0}}`,
		`{"n":12345678901234567890123,"f":1e-9,"t":"2026-07-07T10:00:00+02:00"}`,
	} {
		a, err := s.Canonicalize([]byte(raw))
		require.NoError(t, err)
		out, err := canon.Normalize([]byte(raw))
		require.NoError(t, err)
		require.Equal(t, string(out), string(a.JSON))
		na, err := canon.NormalizeArgs([]byte(raw))
		require.NoError(t, err)
		require.Equal(t, a, na)
	}

	// NormalizeArgs, like Canonicalize, wants an object.
	for _, raw := range []string{`[]`, `"x"`, `1`, `null`} {
		_, err := canon.NormalizeArgs([]byte(raw))
		fe := fieldError(t, err, "")
		require.Contains(t, fe.Reason, "must be a JSON object")
	}
	_, err = canon.NormalizeArgs([]byte(`{"a":1,"a":1}`))
	fieldError(t, err, "a")
}
