package webhook

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func reasonOf(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var de *decodeError
	require.True(t, errors.As(err, &de), "%v is a decodeError", err)
	return de.reason
}

func TestDecodePayload(t *testing.T) {
	t.Parallel()
	deep := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	deepArray := func(n int) string { return `{"a":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + "}" }
	for name, c := range map[string]struct {
		body string
		want string
	}{
		"an event":                   {`{"type":"payment.succeeded","data":{"id":"ch_1","amount":4900,"tags":["a",null,true]}}`, ""},
		"white space after":          {"{\"a\":1}\n\t ", ""},
		"escaped text":               {`{"a":"caf\u00e9 \ud83d\ude00 \\u0000 \n"}`, ""},
		"at the depth limit":         {deep(8), ""},
		"arrays at the depth limit":  {deepArray(8), ""},
		"one too deep":               {deep(9), ReasonTooDeep},
		"arrays one too deep":        {deepArray(9), ReasonTooDeep},
		"very deep":                  {deep(100000), ReasonTooDeep},
		"duplicate key":              {`{"type":"a","type":"b"}`, ReasonDuplicateKey},
		"duplicate key nested":       {`{"data":{"id":"ch_1","id":"ch_2"}}`, ReasonDuplicateKey},
		"duplicate key in an array":  {`{"data":[{"id":1,"id":2}]}`, ReasonDuplicateKey},
		"keys differing in case":     {`{"id":1,"ID":2}`, ""},
		"invalid UTF-8":              {"{\"a\":\"\xff\"}", ReasonInvalidUTF8},
		"overlong UTF-8":             {"{\"a\":\"\xc0\xaf\"}", ReasonInvalidUTF8},
		"lone high surrogate":        {`{"a":"\ud83d"}`, ReasonInvalidUTF8},
		"lone low surrogate":         {`{"a":"\ude00"}`, ReasonInvalidUTF8},
		"reversed surrogates":        {`{"a":"\ude00\ud83d"}`, ReasonInvalidUTF8},
		"escaped NUL":                {`{"a":"x\u0000y"}`, ReasonNUL},
		"escaped NUL in a key":       {`{"\u0000":1}`, ReasonNUL},
		"raw NUL":                    {"{\"a\":\"x\x00\"}", ReasonNUL},
		"not JSON":                   {`type=payment.succeeded`, ReasonMalformedJSON},
		"truncated":                  {`{"a":[1,2`, ReasonMalformedJSON},
		"trailing garbage":           {`{"a":1}x`, ReasonMalformedJSON},
		"two objects":                {`{"a":1}{"a":2}`, ReasonMalformedJSON},
		"an array":                   {`[{"a":1}]`, ReasonNotAnObject},
		"a string":                   {`"event"`, ReasonNotAnObject},
		"empty":                      {``, ReasonMalformedJSON},
		"trailing comma":             {`{"a":1,}`, ReasonMalformedJSON},
		"a number key without quote": {`{1:2}`, ReasonMalformedJSON},
	} {
		_, err := decodePayload([]byte(c.body), 8)
		require.Equal(t, c.want, reasonOf(t, err), name)
	}

	v, err := decodePayload([]byte(`{"data":{"amount":4900.10,"big":123456789012345678901234567890}}`), 8)
	require.NoError(t, err)
	data := v["data"].(map[string]any)
	require.Equal(t, json.Number("4900.10"), data["amount"], "numbers are kept as written")
	require.Equal(t, json.Number("123456789012345678901234567890"), data["big"])
}

// FuzzDecodePayload: the decoder never panics, answers with a known reason,
// and what it accepts is JSON that encoding/json reads to the same value
// (so nothing it accepts means two things).
func FuzzDecodePayload(f *testing.F) {
	for _, seed := range []string{
		`{"type":"payment.succeeded","data":{"id":"ch_1","idempotency_key":"payment:o_1:capture:4900:USD:v1"}}`,
		`{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":1}}}}}}}}}`, `{"a":"\ud83d\ude00"}`, `{"a":"\ud83d"}`, `{"a":1,"a":2}`,
		"{\"a\":\"\xff\"}", `{"a":"\u0000"}`, `{"a":[[[[[[[[[]]]]]]]]]}`, `{}`, `[]`, `{"a":1}{}`, `{"\\u0000":"\\\\u0000"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		v, err := decodePayload(body, 8)
		if err != nil {
			var de *decodeError
			require.True(t, errors.As(err, &de))
			require.Contains(t, Reasons, de.reason)
			return
		}
		var std map[string]any
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&std), "accepted what encoding/json refuses: %q", body)
		require.Equal(t, std, v, "read differently from encoding/json: %q", body)
		require.NotContains(t, string(body), "\x00")
	})
}
