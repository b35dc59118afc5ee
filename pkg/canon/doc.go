// Package canon gives tool-call arguments a canonical identity, so that a
// retried call gets the same idempotency key as the original and a materially
// different call gets a different one.
//
// A tool's argument schema is compiled once with CompileSchema. Each call's
// raw arguments go through Schema.Canonicalize, which returns Args: the
// canonical JSON, its SHA-256 and the canonical decoded value. A key template
// parsed with ParseTemplate renders the idempotency key from Args. Normalize
// applies the schema-independent part of the rules to any JSON document, and
// NormalizeArgs builds Args from an object without a schema.
//
// # Contract
//
// The rules below define when two argument documents are "the same". They are
// part of the key format: changing any of them changes keys, so a change here
// must come with a new key version.
//
// Strict parsing (RFC 8259, plus):
//   - duplicate object keys are rejected at any depth, after the keys are put
//     in Unicode NFC (so "é" and "e\u0301" are duplicates); the error names
//     the path of the duplicate;
//   - input must be valid UTF-8, escapes must not leave a lone UTF-16
//     surrogate, and nothing but white space may follow the value;
//   - nesting is limited to MaxDepth levels;
//   - numbers are kept as their decimal text, never decoded through float64
//     unless the rules for numbers below say so.
//
// Schema defaults: when an object has no member for a property whose
// subschema declares a "default", a copy of the default is inserted before
// anything else happens, recursively (a defaulted object gets its own
// properties' defaults). An omitted field and the explicit default therefore
// canonicalize alike. A member that is present with the value null is not
// absent and gets no default. CompileSchema rejects a default that does not
// canonicalize or does not satisfy its subschema.
//
// Strings: every string value is put in Unicode NFC and stripped of leading
// and trailing white space (Unicode White_Space, as strings.TrimSpace). Object
// keys are put in NFC but never trimmed. Note that NFC also decomposes the
// few composition exclusions (U+FB33 becomes U+05D3 U+05BC).
//
// Enums: a string that equals exactly one of its subschema's "enum" strings
// ignoring case (strings.EqualFold) is replaced by the enum's spelling, so
// "usd" becomes "USD" when the enum is ["USD","EUR"].
//
// Timestamps: a string under "format": "date-time" must be an RFC 3339
// date-time with a time zone ('T' and 'Z' in either case, at most nine
// fraction digits, offset within ±23:59, no leap second). It is converted to
// UTC and written as time.RFC3339Nano does, with trailing zeros of the
// fraction trimmed: "2026-07-07T10:00:00.500+02:00" becomes
// "2026-07-07T08:00:00.5Z". Anything else is a *FieldError.
//
// Integers and money: a number under "type": "integer" (integer but not
// number among its types) must be written as a JSON integer literal. A
// fraction or an exponent (49.5, 4900.0, 4.9e3) is rejected, because money
// goes in integer minor units. Integers are kept exactly, whatever their
// size (12345678901234567890123 stays as written; "-0" becomes "0"), and
// schema bounds such as "minimum" and "maximum" apply exactly.
//
// Other numbers, everywhere else (including Normalize):
//   - an integer literal is kept exactly, as above;
//   - a literal with a fraction or an exponent whose value is an integer of
//     at most 21 digits is written as that integer ("4.9e3" becomes "4900",
//     "9007199254740993.0" becomes "9007199254740993");
//   - any other value is rounded to the nearest float64 and written as ES6
//     Number.prototype.toString writes it (RFC 8785 section 3.2.2.3):
//     shortest round-trip digits, exponent form below 1e-6 and from 1e21 on
//     ("1e+21", "1e-7", "0.002"). A literal beyond the float64 range, or a
//     non-zero one that rounds to zero, is rejected.
//
// This deviates from RFC 8785, which would round every integer above 2^53
// to a float64: identifiers and amounts must never be rounded into each
// other.
//
// Canonical JSON (RFC 8785 style): no insignificant white space; object
// members sorted by the UTF-16 code units of their keys; strings escape only
// '"', '\' and control characters, using \b \f \n \r \t where they exist
// and \u00xx (lowercase hex) otherwise; no HTML escaping of < > &.
//
// Canonicalization is idempotent: canonicalizing canonical output returns it
// unchanged, and for an object Normalize(raw) and NormalizeArgs(raw) give what
// Canonicalize gives under the empty schema {}.
//
// # Schemas
//
// Schemas are JSON Schema draft 2020-12 unless they declare another draft
// with $schema. "format" is asserted, not just annotated. $ref may point only
// inside the schema (or to the standard metaschemas): nothing is ever loaded
// from files or the network. Property names must be in NFC.
//
// The rules that depend on the schema (defaults, enums, date-time,
// integers) follow properties, patternProperties, additionalProperties,
// prefixItems, items, $ref and allOf. They do not look inside anyOf, oneOf,
// not, if/then/else, dependentSchemas or $dynamicRef, because whether those
// apply depends on the value; validation still applies them.
//
// Validation runs on the normalized value, after defaults are filled. Unknown
// fields are only rejected when the schema says "additionalProperties":
// false; fields it lets through become part of the canonical JSON and so of
// the hash.
//
// # Errors
//
// Rejected arguments yield a *FieldError whose Path names the field as a
// dotted path ("customer.id", "items.0.sku") and whose Reason says what is
// wrong in plain words, e.g.
//
//	args.amount_cents: must be an integer without fraction or exponent (money goes in integer minor units, e.g. cents), got 49.5
//
// Only the first, most specific problem is reported. Messages never contain a
// string value longer than 32 bytes, nor the value of a field that failed a
// "pattern" or "format" check, since arguments may hold secrets or card
// numbers. errors.Is(err, ErrInvalidArgs) is true for every *FieldError.
// ErrInvalidArgs, ErrInvalidSchema and ErrInvalidTemplate all match
// op.ErrInvalid as well, so an edge that classifies by the domain's sentinels
// needs no special case.
//
// # Keys
//
// A key template is literal text with placeholders in braces, each a dotted
// field path: "payment:{order_id}:capture:{amount_cents}:{currency}". The
// computed placeholder {_args_hash} renders Args.Hash. Two placeholders must be
// separated by text containing ':'.
//
// Template.Render substitutes each placeholder with the field's canonical
// scalar (strings as they are, numbers as canonical decimal text, booleans as
// true or false), percent-encodes in it (as UTF-8 bytes, %XX) the characters
// ':', '{', '}', '%', white space, control and format characters, and appends
// ":v<version>". Because a rendered value never contains a raw ':', a key can
// be split back into its fields. A placeholder whose field is missing, null,
// an object or an array is an error naming the field.
//
// A key is at most MaxKeyLen (255) bytes. A longer one keeps the longest
// prefix that fits (cut on a rune boundary, never inside a %XX escape),
// followed by "~" and the 64 hex digits of the SHA-256 of the whole key.
// Template.Expand renders the same way without the version suffix, for entity
// ids and dedupe keys.
package canon
