package canon_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/canon"
	"github.com/opledger/opledger/pkg/op"
)

// args canonicalizes raw without a schema.
func args(t *testing.T, raw string) *canon.Args {
	t.Helper()
	a, err := canon.NormalizeArgs([]byte(raw))
	require.NoError(t, err)
	return a
}

func TestParseTemplate(t *testing.T) {
	t.Parallel()

	tmpl, err := canon.ParseTemplate("payment:{order_id}:capture:{amount_cents}:{currency}:{order_id}")
	require.NoError(t, err)
	require.Equal(t, []string{"order_id", "amount_cents", "currency"}, tmpl.Fields())
	require.Equal(t, "payment:{order_id}:capture:{amount_cents}:{currency}:{order_id}", tmpl.String())

	// Fields returns a copy.
	tmpl.Fields()[0] = "changed"
	require.Equal(t, "order_id", tmpl.Fields()[0])

	for _, ok := range []string{"{order_id}", "refund:{customer.id}", "constant", "{a}:{b}", "{a}-x:-{b}", "{items.0.sku}:{_args_hash}", "ключ:{ид}"} {
		_, err := canon.ParseTemplate(ok)
		require.NoError(t, err, ok)
	}
	for tmpl, reason := range map[string]string{
		"":                 "template is empty",
		"a:{order_id":      "unclosed '{' at byte 2",
		"a:{order{id}}":    "unclosed '{' at byte 2",
		"a:order_id}":      "unmatched '}' at byte 10",
		"a:{x}}":           "unmatched '}' at byte 5",
		"a:{}":             "empty placeholder {}",
		"a:{customer..id}": "empty path segment in {customer..id}",
		"a:{.id}":          "empty path segment in {.id}",
		"a:{id.}":          "empty path segment in {id.}",
		"a:{order id}":     `white space or control character in placeholder "order id"`,
		"a:{order\tid}":    `white space or control character in placeholder "order\tid"`,
		"{a}{b}":           "placeholders {a} and {b} must be separated by text containing ':'",
		"{a}-{b}":          "placeholders {a} and {b} must be separated by text containing ':'",
		"x:{a}:y:{b}{c}":   "placeholders {b} and {c} must be separated by text containing ':'",
	} {
		_, err := canon.ParseTemplate(tmpl)
		require.ErrorIs(t, err, canon.ErrInvalidTemplate, tmpl)
		require.ErrorIs(t, err, op.ErrInvalid, tmpl)
		require.NotErrorIs(t, err, canon.ErrInvalidArgs, tmpl)
		require.ErrorContains(t, err, reason, tmpl)
	}
}

func TestRender(t *testing.T) {
	t.Parallel()

	a := args(t, `{"order_id":"A-1","amount_cents":4900,"currency":"EUR","capture":false,"customer":{"id":"c:1"},"items":[{"sku":"x"}],"note":null}`)
	for tmpl, want := range map[string]string{
		"payment:{order_id}:capture:{amount_cents}:{currency}": "payment:A-1:capture:4900:EUR:v3",
		"c:{customer.id}":        "c:c%3A1:v3",
		"{capture}":              "false:v3",
		"sku:{items.0.sku}":      "sku:x:v3",
		"constant":               "constant:v3",
		"h:{_args_hash}":         "h:" + a.Hash + ":v3",
		"{order_id}:{order_id}":  "A-1:A-1:v3",
		"literal {currency} ok:": "literal EUR ok::v3",
	} {
		tp, err := canon.ParseTemplate(tmpl)
		require.NoError(t, err, tmpl)
		got, err := tp.Render(a, 3)
		require.NoError(t, err, tmpl)
		require.Equal(t, want, got, tmpl)
		again, err := tp.Render(a, 3)
		require.NoError(t, err)
		require.Equal(t, got, again, "deterministic")
	}

	// Version is part of the key and must be at least 1.
	tp, err := canon.ParseTemplate("payment:{order_id}")
	require.NoError(t, err)
	v1, err := tp.Render(a, 1)
	require.NoError(t, err)
	v2, err := tp.Render(a, 2)
	require.NoError(t, err)
	require.Equal(t, "payment:A-1:v1", v1)
	require.NotEqual(t, v1, v2)
	for _, v := range []int{0, -1} {
		_, err = tp.Render(a, v)
		require.ErrorIs(t, err, canon.ErrInvalidTemplate)
	}

	// Expand renders without the version.
	got, err := tp.Expand(a)
	require.NoError(t, err)
	require.Equal(t, "payment:A-1", got)
}

func TestRenderFieldErrors(t *testing.T) {
	t.Parallel()

	a := args(t, `{"order_id":"A-1","customer":{"id":"c1"},"items":[1],"note":null}`)
	for tmpl, tc := range map[string]struct{ path, reason string }{
		"p:{amount_cents}":  {"amount_cents", "is missing"},
		"p:{customer.name}": {"customer.name", "is missing"},
		"p:{order_id.x}":    {"order_id.x", "is missing"},
		"p:{items.1}":       {"items.1", "is missing"},
		"p:{customer}":      {"customer", "must be a string, number or boolean for the key template \"p:{customer}\", got an object"},
		"p:{items}":         {"items", "got an array"},
		"p:{note}":          {"note", "got null"},
	} {
		tp, err := canon.ParseTemplate(tmpl)
		require.NoError(t, err)
		for _, render := range []func() (string, error){
			func() (string, error) { return tp.Render(a, 1) },
			func() (string, error) { return tp.Expand(a) },
		} {
			_, err := render()
			fe := fieldError(t, err, tc.path)
			require.Contains(t, fe.Reason, tc.reason, tmpl)
			require.Contains(t, fe.Error(), "args."+tc.path+": ", tmpl)
		}
	}

	tp, err := canon.ParseTemplate("p:{order_id}")
	require.NoError(t, err)
	_, err = tp.Render(nil, 1)
	require.ErrorIs(t, err, canon.ErrInvalidArgs)
}

func TestRenderEscapesValues(t *testing.T) {
	t.Parallel()

	tp, err := canon.ParseTemplate("k:{a}:{b}")
	require.NoError(t, err)
	for raw, want := range map[string]string{
		`{"a":"x:y","b":"z"}`:                    "k:x%3Ay:z:v1",
		`{"a":"x","b":"y:z"}`:                    "k:x:y%3Az:v1",
		`{"a":"{x}","b":"100%"}`:                 "k:%7Bx%7D:100%25:v1",
		`{"a":"two words","b":"tab\there"}`:      "k:two%20words:tab%09here:v1",
		`{"a":"nbsp\u00a0x","b":"zw\u200bj"}`:    "k:nbsp%C2%A0x:zw%E2%80%8Bj:v1",
		`{"a":"nul\u0000","b":"del\u007f"}`:      "k:nul%00:del%7F:v1",
		`{"a":"é/ü~.-_","b":"%3A"}`:              "k:é%2Fü~.-_:%253A:v1",
		`{"a":"acme/c1","b":"/"}`:                "k:acme%2Fc1:%2F:v1",
		`{"a":"","b":""}`:                        "k:::v1",
		`{"a":-12345678901234567890123,"b":1.5}`: "k:-12345678901234567890123:1.5:v1",
	} {
		got, err := tp.Render(args(t, raw), 1)
		require.NoError(t, err, raw)
		require.Equal(t, want, got, raw)
		// The key splits back into exactly its fields.
		require.Len(t, strings.Split(got, ":"), 4, raw)
	}

	// Values that would collide without escaping do not.
	k1, err := tp.Render(args(t, `{"a":"x:y","b":"z"}`), 1)
	require.NoError(t, err)
	k2, err := tp.Render(args(t, `{"a":"x","b":"y:z"}`), 1)
	require.NoError(t, err)
	require.NotEqual(t, k1, k2)
}

func TestRenderKeyLength(t *testing.T) {
	t.Parallel()

	tp, err := canon.ParseTemplate("payment:{order_id}:capture:{amount_cents}:{currency}")
	require.NoError(t, err)
	render := func(orderID string) string {
		t.Helper()
		a := args(t, `{"order_id":"`+orderID+`","amount_cents":4900,"currency":"EUR"}`)
		key, err := tp.Render(a, 1)
		require.NoError(t, err)
		return key
	}

	// At the limit: unchanged.
	fits := strings.Repeat("x", canon.MaxKeyLen-len("payment::capture:4900:EUR:v1"))
	require.Equal(t, "payment:"+fits+":capture:4900:EUR:v1", render(fits))
	require.Len(t, render(fits), canon.MaxKeyLen)

	// One byte over: prefix, "~", SHA-256 of the full key; exactly 255 bytes.
	over := fits + "y"
	full := "payment:" + over + ":capture:4900:EUR:v1"
	sum := sha256.Sum256([]byte(full))
	key := render(over)
	require.Len(t, key, canon.MaxKeyLen)
	require.Equal(t, full[:canon.MaxKeyLen-65]+"~"+hex.EncodeToString(sum[:]), key)
	require.Equal(t, key, render(over), "deterministic")

	// Long keys that share the prefix but differ in the tail stay distinct.
	long := strings.Repeat("o", 1000)
	k1, k2 := render(long+"1"), render(long+"2")
	require.NotEqual(t, k1, k2)
	require.Len(t, k1, canon.MaxKeyLen)
	require.Equal(t, k1[:190], k2[:190])

	// The amount in the tail still matters once truncated.
	a1 := args(t, `{"order_id":"`+long+`","amount_cents":4900,"currency":"EUR"}`)
	a2 := args(t, `{"order_id":"`+long+`","amount_cents":4901,"currency":"EUR"}`)
	r1, err := tp.Render(a1, 1)
	require.NoError(t, err)
	r2, err := tp.Render(a2, 1)
	require.NoError(t, err)
	require.NotEqual(t, r1, r2)

	// Multi-byte runes are never split; %XX escapes are never split.
	for _, v := range []string{strings.Repeat("é", 300), "x" + strings.Repeat("€", 300), "a" + strings.Repeat(" ", 300) + "b", "ab" + strings.Repeat("::", 300)} {
		key := render(v)
		require.LessOrEqual(t, len(key), canon.MaxKeyLen, v)
		require.GreaterOrEqual(t, len(key), canon.MaxKeyLen-3, v)
		require.True(t, utf8.ValidString(key), v)
		prefix, tail, ok := strings.Cut(key, "~")
		require.True(t, ok)
		require.Len(t, tail, 64)
		require.NotContains(t, prefix[len(prefix)-2:], "%", "escape split in %q", prefix)
	}
}
