package canon

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/unicode/norm"
)

// schemaURL is where a compiled schema lives for $ref resolution. Nothing is
// ever loaded from it or from anywhere else.
const schemaURL = "mem:///args.schema.json"

// Schema is a compiled JSON Schema (draft 2020-12 unless the schema's
// $schema says otherwise) for one tool's arguments. It is immutable and safe
// for concurrent use.
type Schema struct {
	name string
	root *jsonschema.Schema
	// nodes holds what canonicalization needs of every subschema it can
	// reach: read-only after CompileSchema.
	nodes map[*jsonschema.Schema]*node
}

// node is the precomputed view of one subschema.
type node struct {
	// closure is the subschema itself, then everything it applies
	// unconditionally through $ref and allOf, transitively, without repeats.
	closure []*jsonschema.Schema
	// patterns are its patternProperties in a fixed order.
	patterns []pattern
	// def is its "default", parsed (not yet normalized); hasDef says it has one.
	def    any
	hasDef bool
}

type pattern struct {
	re     jsonschema.Regexp
	schema *jsonschema.Schema
}

// Args are canonicalized tool arguments.
type Args struct {
	// JSON is the canonical encoding of Value.
	JSON []byte
	// Hash is the lowercase hex SHA-256 of JSON.
	Hash string
	// Value is the canonical decoded value: string, bool, nil, Number,
	// []any and map[string]any. Treat it as read-only: JSON and Hash are not
	// updated if it changes.
	Value map[string]any
}

// NormalizeArgs canonicalizes an arguments object without a schema: only the
// schema-independent rules apply (strict parsing, NFC keys, NFC and trimmed
// strings, canonical numbers). It equals Canonicalize under the schema {}.
// Use it to render keys for tools without a schema, or to rebuild Args from
// canonical JSON stored earlier.
//
// Errors: *FieldError (ErrInvalidArgs).
func NormalizeArgs(raw []byte) (*Args, error) {
	v, err := parse(raw)
	if err != nil {
		return nil, err
	}
	return finish(walker{}, v, nil)
}

// noLoader refuses every URL: a schema may only refer to itself and to the
// standard metaschemas (which the library embeds), never to files or the
// network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("loading %q: external schema references are not allowed", url)
}

// CompileSchema compiles the JSON Schema raw for the tool called name.
//
// The schema itself must be strict JSON (no duplicate keys) and its property
// names must be in Unicode NFC. References may only point inside the schema.
// Format assertions are on: "format" is validated, not just annotated. Every
// "default" must canonicalize and satisfy its own subschema.
//
// Errors: ErrInvalidSchema, wrapped with the reason.
func CompileSchema(name string, raw []byte) (*Schema, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: the tool name is empty", ErrInvalidSchema)
	}
	if _, err := parse(raw); err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrInvalidSchema, name, inSchema(err))
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidSchema, name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidSchema, name, err)
	}
	root, err := c.Compile(schemaURL)
	if err != nil {
		var me *jsonschema.SchemaValidationError
		var ve *jsonschema.ValidationError
		if errors.As(err, &me) && errors.As(me.Err, &ve) {
			// Name the one offending keyword instead of the library's tree.
			e := mostSpecific(ve)
			path, reason := describe(e)
			return nil, fmt.Errorf("%w: %s: not a valid JSON Schema: at /%s: %s", ErrInvalidSchema, name, strings.Join(path, "/"), reason)
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidSchema, name, err)
	}
	s := &Schema{name: name, root: root, nodes: map[*jsonschema.Schema]*node{}}
	if err := s.index(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidSchema, name, err)
	}
	if err := s.checkDefaults(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidSchema, name, err)
	}
	return s, nil
}

// Name returns the tool name the schema was compiled for.
func (s *Schema) Name() string { return s.name }

// index builds s.nodes for every subschema canonicalization can reach.
func (s *Schema) index() error {
	queue := []*jsonschema.Schema{s.root}
	for len(queue) > 0 {
		sch := queue[0]
		queue = queue[1:]
		if sch == nil || s.nodes[sch] != nil {
			continue
		}
		n := &node{}
		s.nodes[sch] = n
		for name := range sch.Properties {
			if !norm.NFC.IsNormalString(name) {
				return fmt.Errorf("%s: property name %q is not in Unicode NFC", location(sch), name)
			}
		}
		for re, ps := range sch.PatternProperties {
			n.patterns = append(n.patterns, pattern{re: re, schema: ps})
		}
		slices.SortFunc(n.patterns, func(a, b pattern) int { return strings.Compare(a.re.String(), b.re.String()) })
		if sch.Default != nil {
			// The library decoded the default with json.Number; re-encode and
			// parse it strictly so it is held like any other input.
			b, err := json.Marshal(*sch.Default)
			if err == nil {
				n.def, err = parse(b)
			}
			if err != nil {
				return fmt.Errorf("%s: default: %s", location(sch), inSchema(err))
			}
			n.hasDef = true
		}
		queue = append(queue, children(sch)...)
	}
	for sch, n := range s.nodes {
		n.closure = closure(sch)
	}
	return nil
}

// children lists the subschemas canonicalization descends into.
func children(sch *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{sch.Ref}
	out = append(out, sch.AllOf...)
	for _, ps := range sch.Properties {
		out = append(out, ps)
	}
	for _, ps := range sch.PatternProperties {
		out = append(out, ps)
	}
	if ap, ok := sch.AdditionalProperties.(*jsonschema.Schema); ok {
		out = append(out, ap)
	}
	out = append(out, sch.PrefixItems...)
	out = append(out, sch.Items2020)
	switch items := sch.Items.(type) {
	case *jsonschema.Schema:
		out = append(out, items)
	case []*jsonschema.Schema:
		out = append(out, items...)
	}
	if ai, ok := sch.AdditionalItems.(*jsonschema.Schema); ok {
		out = append(out, ai)
	}
	return out
}

// closure returns sch followed by every subschema it applies unconditionally
// to the same instance ($ref and allOf, transitively), without repeats.
func closure(sch *jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	var visit func(*jsonschema.Schema)
	visit = func(x *jsonschema.Schema) {
		if x == nil || slices.Contains(out, x) {
			return
		}
		out = append(out, x)
		visit(x.Ref)
		for _, a := range x.AllOf {
			visit(a)
		}
	}
	visit(sch)
	return out
}

// checkDefaults canonicalizes and validates every default against the
// subschema that declares it, so a broken default fails at compile time
// rather than on every call that omits the field.
func (s *Schema) checkDefaults() error {
	for sch, n := range s.nodes {
		if !n.hasDef {
			continue
		}
		w := walker{s: s}
		v, err := w.value(deepCopy(n.def), []*jsonschema.Schema{sch}, nil)
		if err == nil {
			err = validationError(sch.Validate(v))
		}
		if err != nil {
			return fmt.Errorf("%s: default is invalid: %s", location(sch), inSchema(err))
		}
	}
	return nil
}

// inSchema rewords an arguments error found in a schema or a default, so it
// does not read "args." nor match ErrInvalidArgs.
func inSchema(err error) string {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return err.Error()
	}
	if fe.Path == "" {
		return fe.Reason
	}
	return "at " + fe.Path + ": " + fe.Reason
}

// location names a subschema by its JSON pointer within the tool's schema.
func location(sch *jsonschema.Schema) string {
	if loc, ok := strings.CutPrefix(sch.Location, schemaURL); ok {
		if loc == "#" || loc == "" {
			return "schema root"
		}
		return "schema " + loc
	}
	return "schema " + sch.Location
}

// Canonicalize parses raw strictly, fills schema defaults, normalizes every
// value (see the package documentation for the rules), validates the result
// against the schema and returns its canonical form. The arguments must be a
// JSON object.
//
// Errors: *FieldError (ErrInvalidArgs) naming the first, most specific
// problem.
func (s *Schema) Canonicalize(raw []byte) (*Args, error) {
	return s.CanonicalizeIdentity(raw, nil)
}

// CanonicalizeIdentity is Canonicalize with a tool's identity rules applied
// to its identity fields (see Identity), before validation and hashing.
func (s *Schema) CanonicalizeIdentity(raw []byte, id *Identity) (*Args, error) {
	v, err := parse(raw)
	if err != nil {
		return nil, err
	}
	return finish(walker{s: s, id: id}, v, s.root)
}

// finish normalizes a parsed arguments object, validates it against root
// when there is one, and encodes it.
func finish(w walker, v any, root *jsonschema.Schema) (*Args, error) {
	if _, ok := v.(map[string]any); !ok {
		return nil, &FieldError{Reason: "must be a JSON object, got " + typeName(v)}
	}
	var set []*jsonschema.Schema
	if root != nil {
		set = []*jsonschema.Schema{root}
	}
	v, err := w.value(v, set, nil)
	if err != nil {
		return nil, err
	}
	if root != nil {
		if err := validationError(root.Validate(v)); err != nil {
			return nil, err
		}
	}
	b := appendJSON(nil, v)
	sum := sha256.Sum256(b)
	return &Args{JSON: b, Hash: hex.EncodeToString(sum[:]), Value: v.(map[string]any)}, nil
}

// Field returns the canonical scalar at a dotted path ("customer.id";
// a numeric segment indexes an array: "items.0.sku") as a string: strings as
// they are, numbers as their canonical decimal text, booleans as "true" or
// "false". It returns false when the path is missing or names null, an object
// or an array. Keys that contain a dot cannot be addressed.
func (a *Args) Field(path string) (string, bool) {
	v, ok := a.lookup(path)
	if !ok {
		return "", false
	}
	return scalarText(v)
}

func (a *Args) lookup(path string) (any, bool) {
	if a == nil {
		return nil, false
	}
	var cur any = a.Value
	for seg := range strings.SplitSeq(path, ".") {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[seg]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(c) || strconv.Itoa(i) != seg {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func scalarText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case Number:
		return string(v), true
	case bool:
		return strconv.FormatBool(v), true
	}
	return "", false
}

// deepCopy copies a decoded value so a shared default is never mutated.
func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		a := make([]any, len(v))
		for i, e := range v {
			a[i] = deepCopy(e)
		}
		return a
	}
	return v
}
