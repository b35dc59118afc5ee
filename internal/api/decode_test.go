package api

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/op"
)

// Bodies are read one way: exact names, once each, strings only, nothing
// after the object, no invalid UTF-8 or lone surrogate that encoding/json
// would quietly repair.
func TestDecodeFieldsIsStrict(t *testing.T) {
	t.Parallel()
	got, err := decodeFields([]byte(` {"reason":"ok \ud83d\ude00 é","args_hash":"ab"} `+"\n"), "args_hash", "reason")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"reason": "ok 😀 é", "args_hash": "ab"}, got)
	got, err = decodeFields([]byte(`{}`), "reason")
	require.NoError(t, err)
	require.Empty(t, got)

	for body, want := range map[string]string{
		``:                              "must be a JSON object",
		`[]`:                            "must be a JSON object",
		`"reason"`:                      "must be a JSON object",
		`{"reason":"a","reason":"b"}`:   "appears more than once",
		`{"Reason":"a"}`:                `case-sensitive: "reason"`,
		`{"reason":"a","extra":"b"}`:    `unknown field "extra"`,
		`{"reason":1}`:                  "must be a string",
		`{"reason":null}`:               "must be a string",
		`{"reason":{"a":"b"}}`:          "must be a string",
		`{"reason":"a"} {"reason":"b"}`: "only white space",
		`{"reason":"a"`:                 "not JSON",
		"{\"reason\":\"a\xff\"}":        "not UTF-8",
		`{"reason":"\ud800"}`:           "unpaired",
		`{"reason":"\udc00\ud800"}`:     "unpaired",
		`{"reason":"\ud800\u0041"}`:     "unpaired",
		`{"reason":"x\\ud800"}`:         "", // an escaped backslash, then text: fine
		`{"reason":"` + strings.Repeat("a", 10) + `",}`: "not JSON",
	} {
		_, err := decodeFields([]byte(body), "reason")
		if want == "" {
			require.NoError(t, err, body)
			continue
		}
		require.ErrorIs(t, err, op.ErrInvalid, body)
		require.ErrorContains(t, err, want, body)
	}
}
