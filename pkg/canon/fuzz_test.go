package canon_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/opledger/opledger/pkg/canon"
)

// trickyJSON seeds the fuzzers with the cases canonicalization is most
// likely to get wrong.
var trickyJSON = []string{
	`{}`, `[]`, `null`, `true`, `0`, `-0`, `""`, `" "`,
	`{"a":1,"a":2}`,
	`{"caf\u00e9":1,"cafe\u0301":2}`,
	`{"a":{"b":[{"c":1,"c":1}]}}`,
	`{"b":1,"a":2,"\u20ac":3,"\ud83d\ude00":4,"\uff21":5,"\r":6,"\u0080":7}`,
	`{"s":"\u0000\u001f\"\\\/\b\f\n\r\t\u2028\u2029<>&\u007f"}`,
	`["\ud83d\ude00", "\ud83d", "\ude00", "\ud83dx"]`,
	`[1.0, 1e21, 1e-7, 4.50, 2e-3, 333333333.33333329, 1E30, 5e-324, 1.7976931348623157e308]`,
	`[12345678901234567890123, -12345678901234567890123.0, 9007199254740993.0, 999999999999999999999.5]`,
	`[1e309, 1e-400, 0e999999999999, -0.0e-5]`,
	`["  e\u0301  ", "\u00a0\u3000x\u2003", "\ufb33", "\u1e9b\u0323", " \u0301"]`,
	`{"t":"2026-07-07T10:00:00+02:00","n":"USD"}`,
	"{\"a\":\"\xff\"}",
	"\ufeff{}",
	`{"a":1} x`,
	`[01]`, `[.5]`, `[1.]`, `[NaN]`, `{'a':1}`, `{"a":1,}`,
	`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
}

func FuzzNormalize(f *testing.F) {
	for _, s := range trickyJSON {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, err := canon.Normalize(raw)
		if err != nil {
			var fe *canon.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, canon.ErrInvalidArgs) {
				t.Fatalf("error is not a *FieldError: %T %v", err, err)
			}
			return
		}
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("invalid output %q from %q", out, raw)
		}
		again, err := canon.Normalize(out)
		if err != nil {
			t.Fatalf("Normalize(%q) = %q, which fails: %v", raw, out, err)
		}
		if !bytes.Equal(out, again) {
			t.Fatalf("not idempotent: %q -> %q -> %q", raw, out, again)
		}
		// Insignificant white space around the document changes nothing.
		padded, err := canon.Normalize(append(append([]byte(" \n"), raw...), '\t'))
		if err != nil || !bytes.Equal(out, padded) {
			t.Fatalf("padding changed the result: %q vs %q (%v)", out, padded, err)
		}
	})
}

const fuzzSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["id"],
  "properties": {
    "id": {"type": "string", "maxLength": 40},
    "amount": {"type": "integer", "minimum": 0},
    "rate": {"type": "number"},
    "currency": {"type": "string", "enum": ["USD", "EUR"], "default": "USD"},
    "at": {"type": "string", "format": "date-time"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "meta": {"type": "object", "default": {}, "properties": {"n": {"type": "integer", "default": 1}}}
  }
}`

func FuzzCanonicalize(f *testing.F) {
	s, err := canon.CompileSchema("fuzz", []byte(fuzzSchema))
	if err != nil {
		f.Fatal(err)
	}
	tmpl, err := canon.ParseTemplate("t:{id}:{amount}:{currency}")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		`{"id":"x"}`,
		`{"id":" e\u0301 ","amount":12345678901234567890123,"currency":"eur"}`,
		`{"id":"x:y{z}%","amount":0,"rate":1e21,"at":"2026-07-07T10:00:00.5+02:00","tags":["  a ","b"]}`,
		`{"id":"x","amount":4900.0}`,
		`{"id":"x","at":"2026-07-07t10:00:00z","meta":{"n":2}}`,
		`{"id":"x","id":"y"}`,
		`{"id":"x","extra":1}`,
	} {
		f.Add([]byte(seed))
	}
	for _, seed := range trickyJSON {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		a, err := s.Canonicalize(raw)
		if err != nil {
			var fe *canon.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, canon.ErrInvalidArgs) {
				t.Fatalf("error is not a *FieldError: %T %v", err, err)
			}
			return
		}
		if !json.Valid(a.JSON) {
			t.Fatalf("invalid output %q", a.JSON)
		}
		again, err := s.Canonicalize(a.JSON)
		if err != nil {
			t.Fatalf("Canonicalize(%q) = %q, which fails: %v", raw, a.JSON, err)
		}
		if !bytes.Equal(a.JSON, again.JSON) || a.Hash != again.Hash {
			t.Fatalf("not idempotent: %q -> %q -> %q", raw, a.JSON, again.JSON)
		}
		norm, err := canon.Normalize(a.JSON)
		if err != nil || !bytes.Equal(norm, a.JSON) {
			t.Fatalf("Normalize disagrees: %q vs %q (%v)", a.JSON, norm, err)
		}
		key, err := tmpl.Render(a, 1)
		if err != nil {
			// amount is optional; nothing else may be missing.
			var fe *canon.FieldError
			if !errors.As(err, &fe) || fe.Path != "amount" {
				t.Fatalf("Render: %v", err)
			}
			return
		}
		if len(key) > canon.MaxKeyLen || !utf8.ValidString(key) {
			t.Fatalf("bad key %q", key)
		}
		again2, err := tmpl.Render(again, 1)
		if err != nil || again2 != key {
			t.Fatalf("key not stable: %q vs %q (%v)", key, again2, err)
		}
	})
}

// FuzzNormalizeString drives arbitrary Unicode through the string and key
// rules (NFC, trimming, escaping, key order), which random bytes rarely reach
// as valid JSON.
func FuzzNormalizeString(f *testing.F) {
	for _, s := range []string{"", " e\u0301 ", "\ufb33", "\u1e9b\u0323", " \u0301x", "\u00a0\u3000", "a\u0000b", "\u2028", "\U0001f600\uff21", "\u0f73\u0f71"} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, key, value string) {
		raw, err := json.Marshal(map[string]any{key: value, value: []string{key}})
		if err != nil {
			return
		}
		out, err := canon.Normalize(raw)
		if err != nil {
			// Only keys that collide after NFC may fail.
			var fe *canon.FieldError
			if !errors.As(err, &fe) || fe.Reason == "" {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		again, err := canon.Normalize(out)
		if err != nil || !bytes.Equal(out, again) {
			t.Fatalf("not idempotent: %q -> %q -> %q (%v)", raw, out, again, err)
		}
	})
}
