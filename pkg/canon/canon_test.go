package canon_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/canon"
	"github.com/opledger/opledger/pkg/op"
)

// paymentSchema exercises every schema-driven rule.
const paymentSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["order_id", "amount_cents", "currency"],
  "properties": {
    "order_id": {"type": "string", "minLength": 1, "maxLength": 64},
    "amount_cents": {"type": "integer", "minimum": 1, "maximum": 100000000000000000000000000},
    "currency": {"type": "string", "enum": ["USD", "EUR", "GBP"], "default": "USD"},
    "capture": {"type": "boolean", "default": true},
    "note": {"type": "string"},
    "rate": {"type": "number"},
    "card_number": {"type": "string", "pattern": "^[0-9]{12,19}$"},
    "email": {"type": "string", "format": "email"},
    "scheduled_at": {"type": "string", "format": "date-time"},
    "customer": {
      "type": "object",
      "additionalProperties": false,
      "required": ["id"],
      "properties": {
        "id": {"type": "string"},
        "name": {"type": "string"},
        "tier": {"type": "string", "enum": ["standard", "gold"], "default": "standard"}
      }
    },
    "options": {
      "type": "object",
      "default": {},
      "properties": {
        "retries": {"type": "integer", "default": 3},
        "mode": {"type": "string", "default": "fast"}
      }
    },
    "items": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "sku": {"type": "string"},
          "qty": {"type": "integer", "default": 1}
        }
      }
    }
  }
}`

const keyTemplate = "payment:{order_id}:capture:{amount_cents}:{currency}"

type bundle struct {
	schema *canon.Schema
	key    *canon.Template
}

func setup(t *testing.T) bundle {
	t.Helper()
	s, err := canon.CompileSchema("payments.capture", []byte(paymentSchema))
	require.NoError(t, err)
	k, err := canon.ParseTemplate(keyTemplate)
	require.NoError(t, err)
	return bundle{schema: s, key: k}
}

// canonicalize returns the canonical JSON and version-1 key of raw.
func (b bundle) canonicalize(t *testing.T, raw string) (string, string) {
	t.Helper()
	a, err := b.schema.Canonicalize([]byte(raw))
	require.NoError(t, err, raw)
	key, err := b.key.Render(a, 1)
	require.NoError(t, err, raw)
	return string(a.JSON), key
}

// fieldError asserts err is a *FieldError for path and returns it.
func fieldError(t *testing.T, err error, path string) *canon.FieldError {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, canon.ErrInvalidArgs)
	require.ErrorIs(t, err, op.ErrInvalid)
	var fe *canon.FieldError
	require.True(t, errors.As(err, &fe), "%T: %v", err, err)
	require.Equal(t, path, fe.Path, fe.Error())
	return fe
}

func TestCanonicalizeEquivalentArgs(t *testing.T) {
	t.Parallel()
	b := setup(t)

	const base = `{"order_id":"ord-é","amount_cents":4900,"currency":"EUR","scheduled_at":"2026-07-07T08:00:00Z"}`
	wantJSON, wantKey := b.canonicalize(t, base)
	require.Equal(t, `{"amount_cents":4900,"capture":true,"currency":"EUR","options":{"mode":"fast","retries":3},"order_id":"ord-é","scheduled_at":"2026-07-07T08:00:00Z"}`, wantJSON)
	require.Equal(t, "payment:ord-é:capture:4900:EUR:v1", wantKey)

	same := map[string]string{
		"key order":            `{"scheduled_at":"2026-07-07T08:00:00Z","currency":"EUR","amount_cents":4900,"order_id":"ord-é"}`,
		"NFD string":           `{"order_id":"ord-e\u0301","amount_cents":4900,"currency":"EUR","scheduled_at":"2026-07-07T08:00:00Z"}`,
		"escaped NFC string":   `{"order_id":"ord-\u00e9","amount_cents":4900,"currency":"EUR","scheduled_at":"2026-07-07T08:00:00Z"}`,
		"surrounding space":    "{\"order_id\":\"  ord-é\\t\\n\",\"amount_cents\":4900,\"currency\":\" EUR \",\"scheduled_at\":\" 2026-07-07T08:00:00Z\"}",
		"whitespace in JSON":   "{\n  \"order_id\" : \"ord-é\",\n\t\"amount_cents\" : 4900 ,\r\n \"currency\":\"EUR\", \"scheduled_at\":\"2026-07-07T08:00:00Z\"\n}\n",
		"explicit defaults":    `{"order_id":"ord-é","amount_cents":4900,"currency":"EUR","capture":true,"options":{"mode":"fast","retries":3},"scheduled_at":"2026-07-07T08:00:00Z"}`,
		"partial defaults":     `{"order_id":"ord-é","amount_cents":4900,"currency":"EUR","options":{"retries":3},"scheduled_at":"2026-07-07T08:00:00Z"}`,
		"enum case":            `{"order_id":"ord-é","amount_cents":4900,"currency":"eur","scheduled_at":"2026-07-07T08:00:00Z"}`,
		"enum mixed case":      `{"order_id":"ord-é","amount_cents":4900,"currency":"eUr","scheduled_at":"2026-07-07T08:00:00Z"}`,
		"timezone offset":      `{"order_id":"ord-é","amount_cents":4900,"currency":"EUR","scheduled_at":"2026-07-07T10:00:00+02:00"}`,
		"negative offset":      `{"order_id":"ord-é","amount_cents":4900,"currency":"EUR","scheduled_at":"2026-07-07T03:30:00-04:30"}`,
		"zero fraction":        `{"order_id":"ord-é","amount_cents":4900,"currency":"EUR","scheduled_at":"2026-07-07T08:00:00.000Z"}`,
		"lowercase t and z":    `{"order_id":"ord-é","amount_cents":4900,"currency":"EUR","scheduled_at":"2026-07-07t08:00:00z"}`,
		"escaped solidus etc.": `{"order_id":"\u006frd-\u00e9","amount_cents":4900,"currency":"E\u0055R","scheduled_at":"2026-07-07T08:00:00Z"}`,
	}
	for name, raw := range same {
		gotJSON, gotKey := b.canonicalize(t, raw)
		require.Equal(t, wantJSON, gotJSON, name)
		require.Equal(t, wantKey, gotKey, name)
	}

	different := map[string]string{
		"amount":   `{"order_id":"ord-é","amount_cents":4901,"currency":"EUR","scheduled_at":"2026-07-07T08:00:00Z"}`,
		"currency": `{"order_id":"ord-é","amount_cents":4900,"currency":"USD","scheduled_at":"2026-07-07T08:00:00Z"}`,
		"order id": `{"order_id":"ord-e","amount_cents":4900,"currency":"EUR","scheduled_at":"2026-07-07T08:00:00Z"}`,
		"inner ws": `{"order_id":"ord- é","amount_cents":4900,"currency":"EUR","scheduled_at":"2026-07-07T08:00:00Z"}`,
	}
	keys := map[string]string{wantKey: "base"}
	for name, raw := range different {
		gotJSON, gotKey := b.canonicalize(t, raw)
		require.NotEqual(t, wantJSON, gotJSON, name)
		require.NotContains(t, keys, gotKey, name)
		keys[gotKey] = name
	}

	// A field outside the key changes the canonical JSON and hash, not the key.
	gotJSON, gotKey := b.canonicalize(t, `{"order_id":"ord-é","amount_cents":4900,"currency":"EUR","scheduled_at":"2026-07-07T08:00:01Z"}`)
	require.NotEqual(t, wantJSON, gotJSON)
	require.Equal(t, wantKey, gotKey)
}

func TestCanonicalizeArgsHashAndValue(t *testing.T) {
	t.Parallel()
	b := setup(t)

	a, err := b.schema.Canonicalize([]byte(`{"order_id":"o1","amount_cents":12345678901234567890123,"currency":"gbp","customer":{"id":" c1 "},"items":[{"sku":"a"}]}`))
	require.NoError(t, err)
	sum := sha256.Sum256(a.JSON)
	require.Equal(t, hex.EncodeToString(sum[:]), a.Hash)
	require.Equal(t, canon.Number("12345678901234567890123"), a.Value["amount_cents"])
	require.Equal(t, "GBP", a.Value["currency"])
	require.Equal(t, true, a.Value["capture"])
	require.Equal(t, map[string]any{"id": "c1", "tier": "standard"}, a.Value["customer"])
	require.Equal(t, []any{map[string]any{"sku": "a", "qty": canon.Number("1")}}, a.Value["items"])

	// Value and JSON say the same thing.
	var decoded any
	d := json.NewDecoder(strings.NewReader(string(a.JSON)))
	d.UseNumber()
	require.NoError(t, d.Decode(&decoded))
	require.Equal(t, a.Value, decoded)

	for path, want := range map[string]string{
		"order_id":      "o1",
		"amount_cents":  "12345678901234567890123",
		"currency":      "GBP",
		"capture":       "true",
		"customer.id":   "c1",
		"customer.tier": "standard",
		"items.0.sku":   "a",
		"items.0.qty":   "1",
	} {
		got, ok := a.Field(path)
		require.True(t, ok, path)
		require.Equal(t, want, got, path)
	}
	for _, path := range []string{"", "missing", "customer", "items", "items.1.sku", "items.-1.sku", "items.00.sku", "items.x", "order_id.x", "customer.id.x"} {
		_, ok := a.Field(path)
		require.False(t, ok, path)
	}
}

func TestCanonicalizeIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for _, raw := range []string{
		`{"order_id":" e\u0301 ","amount_cents":7,"currency":"usd","rate":4.50,"note":"<a&b>\u2028\u007f\u0000","scheduled_at":"2026-07-07T10:00:00.123400+02:00"}`,
		`{"order_id":"x","amount_cents":5,"currency":"EUR","rate":1E30,"items":[{},{"qty":2}],"customer":{"id":"\ud83d\ude00"}}`,
		`{"order_id":"x","amount_cents":100000000000000000000000000,"currency":"EUR","rate":-1e-7}`,
	} {
		a, err := b.schema.Canonicalize([]byte(raw))
		require.NoError(t, err)
		again, err := b.schema.Canonicalize(a.JSON)
		require.NoError(t, err)
		require.Equal(t, string(a.JSON), string(again.JSON))
		require.Equal(t, a.Hash, again.Hash)
		norm, err := canon.Normalize(a.JSON)
		require.NoError(t, err)
		require.Equal(t, string(a.JSON), string(norm))
		once, err := canon.Normalize([]byte(raw))
		require.NoError(t, err)
		twice, err := canon.Normalize(once)
		require.NoError(t, err)
		require.Equal(t, string(once), string(twice))
	}
}

func TestCanonicalizeIntegers(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for _, lit := range []string{"49.5", "4900.0", "4.9e3", "49E2", "1e2", "0.0"} {
		_, err := b.schema.Canonicalize([]byte(`{"order_id":"o","currency":"USD","amount_cents":` + lit + `}`))
		fe := fieldError(t, err, "amount_cents")
		require.Contains(t, fe.Error(), "args.amount_cents: must be an integer")
		require.Contains(t, fe.Reason, "minor units")
		require.True(t, strings.HasSuffix(fe.Reason, "got "+lit), fe.Reason)
	}
	// Integer-typed fields nested in arrays are checked too.
	_, err := b.schema.Canonicalize([]byte(`{"order_id":"o","currency":"USD","amount_cents":1,"items":[{"qty":1},{"qty":1.5}]}`))
	fieldError(t, err, "items.1.qty")

	// Big integers are exact, bounds still apply exactly.
	jsonText, _ := b.canonicalize(t, `{"order_id":"o","currency":"USD","amount_cents":12345678901234567890123}`)
	require.Contains(t, jsonText, `"amount_cents":12345678901234567890123,`)
	jsonText, _ = b.canonicalize(t, `{"order_id":"o","currency":"USD","amount_cents":100000000000000000000000000}`)
	require.Contains(t, jsonText, `"amount_cents":100000000000000000000000000,`)
	_, err = b.schema.Canonicalize([]byte(`{"order_id":"o","currency":"USD","amount_cents":100000000000000000000000001}`))
	fe := fieldError(t, err, "amount_cents")
	require.Equal(t, "must be at most 100000000000000000000000000, got 100000000000000000000000001", fe.Reason)
	_, err = b.schema.Canonicalize([]byte(`{"order_id":"o","currency":"USD","amount_cents":0}`))
	fe = fieldError(t, err, "amount_cents")
	require.Equal(t, "must be at least 1, got 0", fe.Reason)

	// 2^53+1 and 2^53 stay distinct.
	_, k1 := b.canonicalize(t, `{"order_id":"o","currency":"USD","amount_cents":9007199254740993}`)
	_, k2 := b.canonicalize(t, `{"order_id":"o","currency":"USD","amount_cents":9007199254740992}`)
	require.NotEqual(t, k1, k2)
	require.Equal(t, "payment:o:capture:9007199254740993:USD:v1", k1)
}

func TestCanonicalizeNumbers(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for lit, want := range map[string]string{
		"4.50":                  "4.5",
		"4900.0":                "4900",
		"4.9e3":                 "4900",
		"-0":                    "0",
		"-0.0":                  "0",
		"0.1":                   "0.1",
		"1E30":                  "1e+30",
		"2e-3":                  "0.002",
		"1e-7":                  "1e-7",
		"333333333.33333329":    "333333333.3333333",
		"9007199254740993.0":    "9007199254740993",
		"12345678901234567e5":   "1.2345678901234568e+21",
		"1234567890123456789e2": "123456789012345678900",
	} {
		jsonText, _ := b.canonicalize(t, `{"order_id":"o","currency":"USD","amount_cents":1,"rate":`+lit+`}`)
		require.Contains(t, jsonText, `"rate":`+want+`}`, lit)
	}
	for _, lit := range []string{"1e400", "-1e400", "1e-400", "1e99999999999999999999"} {
		_, err := b.schema.Canonicalize([]byte(`{"order_id":"o","currency":"USD","amount_cents":1,"rate":` + lit + `}`))
		fe := fieldError(t, err, "rate")
		require.Contains(t, fe.Reason, "outside the range of a 64-bit float")
	}
}

func TestCanonicalizeDateTime(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for in, want := range map[string]string{
		"2026-07-07T10:00:00+02:00":            "2026-07-07T08:00:00Z",
		"2026-07-07T08:00:00.500Z":             "2026-07-07T08:00:00.5Z",
		"2026-07-07T08:00:00.123456789-00:00":  "2026-07-07T08:00:00.123456789Z",
		"2026-01-01T00:30:00+01:00":            "2025-12-31T23:30:00Z",
		"2026-07-07T23:59:59.9+23:59":          "2026-07-07T00:00:59.9Z",
		"  2026-07-07t08:00:00z ":              "2026-07-07T08:00:00Z",
		"2024-02-29T12:00:00Z":                 "2024-02-29T12:00:00Z",
		"9999-12-31T23:59:59.999999999+00:00":  "9999-12-31T23:59:59.999999999Z",
		"0000-01-01T00:00:00-01:00":            "0000-01-01T01:00:00Z",
		"2026-07-07T08:00:00.000000000+00:00":  "2026-07-07T08:00:00Z",
		"2026-07-07T08:00:00.100000000+00:00":  "2026-07-07T08:00:00.1Z",
		"2026-07-07T08:00:00.0000000010+00:00": "", // ten fraction digits
	} {
		raw := `{"order_id":"o","currency":"USD","amount_cents":1,"scheduled_at":"` + in + `"}`
		if want == "" {
			_, err := b.schema.Canonicalize([]byte(raw))
			fieldError(t, err, "scheduled_at")
			continue
		}
		jsonText, _ := b.canonicalize(t, raw)
		require.Contains(t, jsonText, `"scheduled_at":"`+want+`"`, in)
	}
	for _, in := range []string{
		"2026-07-07", "2026-07-07T08:00:00", "2026-07-07 08:00:00Z", "2026-07-07T08:00Z",
		"2026-07-07T08:00:00,5Z", "2026-07-07T08:00:00.Z", "2026-07-07T24:00:00Z",
		"2026-07-07T08:00:60Z", "2026-02-30T08:00:00Z", "2026-13-01T08:00:00Z",
		"2026-07-07T08:00:00+24:00", "2026-07-07T08:00:00+02:60", "2026-07-07T08:00:00+0200",
		"0000-01-01T00:30:00+01:00", "9999-12-31T23:30:00-01:00", "+2026-07-07T08:00:00Z",
		"２０２６-07-07T08:00:00Z", "tomorrow at noon",
	} {
		_, err := b.schema.Canonicalize([]byte(`{"order_id":"o","currency":"USD","amount_cents":1,"scheduled_at":"` + in + `"}`))
		fe := fieldError(t, err, "scheduled_at")
		require.Contains(t, fe.Reason, "RFC 3339", in)
	}
}

func TestCanonicalizeStrings(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// Values are NFC and trimmed (Unicode white space included); inner white
	// space is kept.
	jsonText, _ := b.canonicalize(t, "{\"order_id\":\"\\u00a0\\u3000Cafe\\u0301  au lait\\u2003\\n\",\"currency\":\"USD\",\"amount_cents\":1}")
	require.Contains(t, jsonText, `"order_id":"Café  au lait"`)

	// Keys are NFC but not trimmed.
	out, err := canon.Normalize([]byte(`{" e\u0301 ":" e\u0301 "}`))
	require.NoError(t, err)
	require.Equal(t, `{" é ":"é"}`, string(out))

	// A string that is only white space becomes empty.
	out, err = canon.Normalize([]byte(`[" \t\r\n "]`))
	require.NoError(t, err)
	require.Equal(t, `[""]`, string(out))
}

func TestCanonicalizeEnums(t *testing.T) {
	t.Parallel()

	s, err := canon.CompileSchema("enums", []byte(`{
	  "type": "object",
	  "properties": {
	    "currency": {"enum": ["USD", "EUR", 7, null]},
	    "ambiguous": {"enum": ["abc", "ABC"]},
	    "via_ref": {"$ref": "#/$defs/color"},
	    "via_allof": {"allOf": [{"$ref": "#/$defs/color"}]},
	    "list": {"type": "array", "items": {"$ref": "#/$defs/color"}},
	    "pair": {"type": "array", "prefixItems": [{"enum": ["A"]}, {"enum": ["B"]}]}
	  },
	  "patternProperties": {"^tag_": {"enum": ["Alpha"]}},
	  "additionalProperties": {"enum": ["Other"]},
	  "$defs": {"color": {"type": "string", "enum": ["Red", "Green"]}}
	}`))
	require.NoError(t, err)

	a, err := s.Canonicalize([]byte(`{"currency":"usd","ambiguous":"abc","via_ref":"RED","via_allof":"green","list":["red","GREEN"],"pair":["a","b"],"tag_x":"ALPHA","misc":"other"}`))
	require.NoError(t, err)
	require.Equal(t, `{"ambiguous":"abc","currency":"USD","list":["Red","Green"],"misc":"Other","pair":["A","B"],"tag_x":"Alpha","via_allof":"Green","via_ref":"Red"}`, string(a.JSON))

	// Ambiguous case-insensitive matches are left to validation.
	_, err = s.Canonicalize([]byte(`{"ambiguous":"Abc"}`))
	fe := fieldError(t, err, "ambiguous")
	require.Equal(t, `must be one of abc, ABC, got "Abc"`, fe.Reason)

	// A value that matches nothing names the field and the choices.
	_, err = s.Canonicalize([]byte(`{"currency":"usdx"}`))
	fe = fieldError(t, err, "currency")
	require.Equal(t, `must be one of USD, EUR, 7, null, got "usdx"`, fe.Reason)
}

func TestCanonicalizeDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// Defaults fill nested objects that are present (customer) and objects
	// that were themselves defaulted (options), and items of arrays.
	jsonText, _ := b.canonicalize(t, `{"order_id":"o","amount_cents":1,"customer":{"id":"c"},"items":[{"sku":"x"},{"sku":"y","qty":2}]}`)
	require.Equal(t, `{"amount_cents":1,"capture":true,"currency":"USD","customer":{"id":"c","tier":"standard"},"items":[{"qty":1,"sku":"x"},{"qty":2,"sku":"y"}],"options":{"mode":"fast","retries":3},"order_id":"o"}`, jsonText)

	// A default is filled before validation, so a required field with a
	// default may be omitted.
	_, key := b.canonicalize(t, `{"order_id":"o","amount_cents":1}`)
	require.Equal(t, "payment:o:capture:1:USD:v1", key)

	// An explicit null is not absent: no default, and validation says so.
	_, err := b.schema.Canonicalize([]byte(`{"order_id":"o","amount_cents":1,"currency":null}`))
	fe := fieldError(t, err, "currency")
	require.Equal(t, "must be a string, got null", fe.Reason)

	// Defaults are copied: filling one call never leaks into the next.
	a1, err := b.schema.Canonicalize([]byte(`{"order_id":"o","amount_cents":1}`))
	require.NoError(t, err)
	a1.Value["options"].(map[string]any)["mode"] = "mutated"
	a2, err := b.schema.Canonicalize([]byte(`{"order_id":"o","amount_cents":1}`))
	require.NoError(t, err)
	require.Equal(t, "fast", a2.Value["options"].(map[string]any)["mode"])

	// Defaults reached through $ref and allOf, and defaults that need
	// normalizing themselves.
	s, err := canon.CompileSchema("refs", []byte(`{
	  "type": "object",
	  "properties": {
	    "a": {"$ref": "#/$defs/withDefault"},
	    "b": {"allOf": [{"type": "string"}, {"default": "  e\u0301  "}]},
	    "c": {"type": "string", "enum": ["USD"], "default": "usd"},
	    "d": {"type": "number", "default": 4.50}
	  },
	  "$defs": {"withDefault": {"type": "integer", "default": 42}}
	}`))
	require.NoError(t, err)
	a, err := s.Canonicalize([]byte(`{}`))
	require.NoError(t, err)
	require.Equal(t, `{"a":42,"b":"é","c":"USD","d":4.5}`, string(a.JSON))
}

func TestCompileSchemaRejects(t *testing.T) {
	t.Parallel()

	for name, raw := range map[string]string{
		"not JSON":                `{"type":`,
		"duplicate key":           `{"type":"object","properties":{"a":{},"a":{}}}`,
		"trailing data":           `{"type":"object"} {}`,
		"bad keyword value":       `{"type":"objekt"}`,
		"bad regexp":              `{"type":"object","properties":{"a":{"pattern":"(?=x)"}}}`,
		"external file ref":       `{"$ref":"file:///etc/passwd"}`,
		"external relative ref":   `{"$ref":"other.json"}`,
		"external web ref":        `{"properties":{"a":{"$ref":"https://schemas.invalid/a.json"}}}`,
		"non-NFC property":        `{"properties":{"cafe\u0301":{}}}`,
		"invalid integer default": `{"properties":{"a":{"type":"integer","default":49.5}}}`,
		"default fails schema":    `{"properties":{"a":{"type":"string","enum":["X"],"default":"Y"}}}`,
		"default fails nested":    `{"properties":{"o":{"type":"object","default":{},"properties":{"n":{"type":"integer","default":"3"}}}}}`,
		"recursive default":       `{"$defs":{"node":{"type":"object","properties":{"child":{"$ref":"#/$defs/node","default":{}}}}},"$ref":"#/$defs/node"}`,
	} {
		_, err := canon.CompileSchema("tool", []byte(raw))
		require.ErrorIs(t, err, canon.ErrInvalidSchema, name)
		require.ErrorIs(t, err, op.ErrInvalid, name)
		require.NotErrorIs(t, err, canon.ErrInvalidArgs, name)
	}
	_, err := canon.CompileSchema("", []byte(`{}`))
	require.ErrorIs(t, err, canon.ErrInvalidSchema)

	_, err = canon.CompileSchema("tool", []byte(`{"properties":{"a":{"type":"integer","default":49.5}}}`))
	require.ErrorContains(t, err, "/properties/a")
	require.ErrorContains(t, err, "minor units")
}

func TestCanonicalizeRejectsArgs(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for name, tc := range map[string]struct {
		raw, path, reason string
	}{
		"not an object":     {`[1]`, "", "must be a JSON object, got an array"},
		"missing required":  {`{"amount_cents":1}`, "order_id", "is required"},
		"two missing":       {`{"currency":"USD"}`, "order_id", "is required (also missing: amount_cents)"},
		"missing nested":    {`{"order_id":"o","amount_cents":1,"customer":{}}`, "customer.id", "is required"},
		"unknown field":     {`{"order_id":"o","amount_cents":1,"colour":"red"}`, "colour", "is not a field of this object"},
		"unknown nested":    {`{"order_id":"o","amount_cents":1,"customer":{"id":"c","vip":true}}`, "customer.vip", "is not a field of this object"},
		"wrong type":        {`{"order_id":7,"amount_cents":1}`, "order_id", "must be a string, got a number"},
		"wrong type nested": {`{"order_id":"o","amount_cents":1,"items":[{"sku":[]}]}`, "items.0.sku", "must be a string, got an array"},
		"integer as string": {`{"order_id":"o","amount_cents":"100"}`, "amount_cents", "must be an integer, got a string"},
		"enum":              {`{"order_id":"o","amount_cents":1,"currency":"JPY"}`, "currency", `must be one of USD, EUR, GBP, got "JPY"`},
		"empty after trim":  {`{"order_id":"   ","amount_cents":1}`, "order_id", "must be at least 1 characters long, got 0"},
		"format":            {`{"order_id":"o","amount_cents":1,"email":"not-an-email"}`, "email", "must be a valid email"},
		"duplicate":         {`{"order_id":"o","amount_cents":1,"customer":{"id":"a","id":"b"}}`, "customer.id", "duplicate key"},
	} {
		_, err := b.schema.Canonicalize([]byte(tc.raw))
		fe := fieldError(t, err, tc.path)
		require.Equal(t, tc.reason, fe.Reason, name)
		if tc.path == "" {
			require.Equal(t, "args: "+tc.reason, fe.Error(), name)
		} else {
			require.Equal(t, "args."+tc.path+": "+tc.reason, fe.Error(), name)
		}
	}
}

func TestErrorsDoNotLeakValues(t *testing.T) {
	t.Parallel()
	b := setup(t)

	const secret = "4111111111111111"
	long := strings.Repeat("s3cr3t-", 10)
	for name, raw := range map[string]string{
		"pattern":        `{"order_id":"o","amount_cents":1,"card_number":"` + secret + `x"}`,
		"format":         `{"order_id":"o","amount_cents":1,"email":"` + secret + `"}`,
		"long enum":      `{"order_id":"o","amount_cents":1,"currency":"` + long + `"}`,
		"too long":       `{"order_id":"` + long + `","amount_cents":1}`,
		"long number":    `{"order_id":"o","amount_cents":1.` + strings.Repeat("4111", 20) + `}`,
		"long date-time": `{"order_id":"o","amount_cents":1,"scheduled_at":"` + long + `"}`,
		"bad JSON":       `{"order_id":"` + long + `",,}`,
		"secret JSON":    `{"card_number":"` + secret + `" "x"}`,
	} {
		_, err := b.schema.Canonicalize([]byte(raw))
		require.ErrorIs(t, err, canon.ErrInvalidArgs, name)
		msg := err.Error()
		require.NotContains(t, msg, long, name)
		require.NotContains(t, msg, strings.Repeat("s3cr3t-", 5), name)
		require.NotContains(t, msg, secret, name)
		require.NotContains(t, msg, "41114111", name)
	}

	// Keys are not values, but a very long one is shortened too.
	for name, raw := range map[string]string{
		"long unknown": `{"order_id":"o","amount_cents":1,"` + long + `":1}`,
		"long dup key": `{"order_id":"o","amount_cents":1,"` + long + `":1,"` + long + `":2}`,
	} {
		_, err := b.schema.Canonicalize([]byte(raw))
		require.ErrorIs(t, err, canon.ErrInvalidArgs, name)
		require.NotContains(t, err.Error(), long, name)
		require.Contains(t, err.Error(), "s3cr…", name)
	}

	// Short values are shown: they help the model fix its call.
	_, err := b.schema.Canonicalize([]byte(`{"order_id":"o","amount_cents":49.5}`))
	require.EqualError(t, err, "args.amount_cents: must be an integer without fraction or exponent (money goes in integer minor units, e.g. cents), got 49.5")
}

func TestCanonicalizeConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)

	want, _ := b.canonicalize(t, `{"order_id":"o","amount_cents":1,"customer":{"id":"c"}}`)
	var wg sync.WaitGroup
	results := make([]string, 16)
	for i := range results {
		wg.Go(func() {
			a, err := b.schema.Canonicalize([]byte(`{"customer":{"id":"c"},"amount_cents":1,"order_id":"o"}`))
			if err == nil {
				results[i] = string(a.JSON)
			}
		})
	}
	wg.Wait()
	for _, got := range results {
		require.Equal(t, want, got)
	}
}

func TestSchemaName(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Equal(t, "payments.capture", b.schema.Name())
}

func TestValidationReasons(t *testing.T) {
	t.Parallel()

	s, err := canon.CompileSchema("reasons", []byte(`{
	  "type": "object",
	  "properties": {
	    "method": {"oneOf": [
	      {"type": "object", "required": ["card"], "properties": {"card": {"type": "string"}}, "additionalProperties": false},
	      {"type": "object", "required": ["iban"], "properties": {"iban": {"type": "string"}}, "additionalProperties": false}
	    ]},
	    "both": {"oneOf": [{"type": "string"}, {"maxLength": 3}]},
	    "kind": {"const": "refund"},
	    "step": {"type": "number", "multipleOf": 0.5},
	    "limit": {"type": "number", "exclusiveMaximum": 10},
	    "tags": {"type": "array", "minItems": 2, "uniqueItems": true},
	    "never": false,
	    "not_x": {"not": {"const": "x"}},
	    "ship": {"type": "object", "dependentRequired": {"street": ["city"]}}
	  }
	}`))
	require.NoError(t, err)

	for raw, tc := range map[string]struct{ path, reason string }{
		`{"method":{"card":5}}`:                {"method.card", "must be a string, got a number"},
		`{"method":"x"}`:                       {"method", "does not match any of the allowed alternatives (oneOf)"},
		`{"both":"ab"}`:                        {"both", "matches more than one alternative of oneOf (0 and 1)"},
		`{"kind":"charge"}`:                    {"kind", `must be "refund"`},
		`{"step":0.3}`:                         {"step", "must be a multiple of 0.5"},
		`{"limit":10}`:                         {"limit", "must be less than 10, got 10"},
		`{"tags":["a"]}`:                       {"tags", "must have at least 2 items, got 1"},
		`{"tags":["a"," a"]}`:                  {"tags", "must not repeat an item (items 0 and 1 are equal)"},
		`{"never":1}`:                          {"never", "is not allowed"},
		`{"not_x":"x"}`:                        {"not_x", "matches a schema it must not match"},
		`{"ship":{"street":"Main St"}}`:        {"ship.city", `is required when "street" is present`},
		`{"method":{"card":"c","extra":true}}`: {"method.extra", "is not a field of this object"},
	} {
		_, err := s.Canonicalize([]byte(raw))
		fe := fieldError(t, err, tc.path)
		require.Equal(t, tc.reason, fe.Reason, raw)
	}
}
