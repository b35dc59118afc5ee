package canon

import (
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// walker normalizes a parsed value in place, guided by the subschemas that
// apply to each location. With a nil schema only the schema-independent rules
// apply (that is Normalize).
type walker struct {
	s  *Schema
	id *Identity
}

// value normalizes v, to which the subschemas in set apply.
func (w walker) value(v any, set []*jsonschema.Schema, path []string) (any, error) {
	if len(path) > MaxDepth {
		return nil, fieldErr(path[:MaxDepth], "nesting deeper than "+strconv.Itoa(MaxDepth)+" levels (are defaults recursive?)")
	}
	set = w.expand(set)
	switch v := v.(type) {
	case string:
		return w.str(v, set, path)
	case Number:
		return number(v, set, path)
	case map[string]any:
		return w.object(v, set, path)
	case []any:
		for i, e := range v {
			nv, err := w.value(e, w.itemSchemas(set, i), append(path, strconv.Itoa(i)))
			if err != nil {
				return nil, err
			}
			v[i] = nv
		}
		return v, nil
	}
	return v, nil // bool, nil
}

// expand adds everything the subschemas in set apply through $ref and allOf.
func (w walker) expand(set []*jsonschema.Schema) []*jsonschema.Schema {
	if w.s == nil || len(set) == 0 {
		return nil
	}
	var out []*jsonschema.Schema
	for _, sch := range set {
		n := w.s.nodes[sch]
		if n == nil {
			continue
		}
		for _, c := range n.closure {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

func (w walker) str(s string, set []*jsonschema.Schema, path []string) (any, error) {
	s = normalizeString(s)
	s, err := w.id.normalize(s, path)
	if err != nil {
		return nil, err
	}
	for _, sch := range set {
		if sch.Format != nil && sch.Format.Name == "date-time" {
			t, ok := canonicalDateTime(s)
			if !ok {
				return nil, fieldErr(path, "must be an RFC 3339 date-time with a time zone, such as 2026-07-07T08:00:00Z")
			}
			s = t
			break
		}
	}
	for _, sch := range set {
		if sch.Enum != nil {
			s = matchEnum(s, sch.Enum.Values)
		}
	}
	return s, nil
}

// matchEnum returns the enum's spelling of s when s equals exactly one of its
// string values ignoring case, and s unchanged otherwise.
func matchEnum(s string, values []any) string {
	match := ""
	for _, v := range values {
		e, ok := v.(string)
		if !ok {
			continue
		}
		if e == s {
			return s
		}
		if strings.EqualFold(e, s) {
			if match != "" && match != e {
				return s // ambiguous: leave it to validation
			}
			match = e
		}
	}
	if match == "" {
		return s
	}
	return match
}

func number(n Number, set []*jsonschema.Schema, path []string) (any, error) {
	lit := string(n)
	if integerOnly(set) && !isIntegerLiteral(lit) {
		return nil, fieldErr(path, "must be an integer without fraction or exponent (money goes in integer minor units, e.g. cents), got "+show(n))
	}
	c, err := canonicalNumber(lit)
	if err != nil {
		return nil, fieldErr(path, "is outside the range of a 64-bit float, got "+show(n))
	}
	return Number(c), nil
}

// integerOnly reports whether some applicable subschema allows integers but
// not other numbers.
func integerOnly(set []*jsonschema.Schema) bool {
	for _, sch := range set {
		if sch.Types == nil {
			continue
		}
		types := sch.Types.ToStrings()
		if slices.Contains(types, "integer") && !slices.Contains(types, "number") {
			return true
		}
	}
	return false
}

func (w walker) object(obj map[string]any, set []*jsonschema.Schema, path []string) (any, error) {
	// Fill absent properties that have a default, before anything else, so
	// an omitted default and an explicit one canonicalize alike. The first
	// applicable subschema that declares a default for a name wins.
	for _, sch := range set {
		for _, name := range sortedPropertyNames(sch) {
			if _, ok := obj[name]; ok {
				continue
			}
			if d, ok := w.defaultOf(sch.Properties[name]); ok {
				obj[name] = deepCopy(d)
			}
		}
	}
	for _, k := range sortedKeys(obj) {
		nv, err := w.value(obj[k], w.propertySchemas(set, k), append(path, k))
		if err != nil {
			return nil, err
		}
		obj[k] = nv
	}
	return obj, nil
}

func sortedPropertyNames(sch *jsonschema.Schema) []string {
	names := make([]string, 0, len(sch.Properties))
	for name := range sch.Properties {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// defaultOf returns the default a property subschema declares, itself or
// through $ref and allOf.
func (w walker) defaultOf(sch *jsonschema.Schema) (any, bool) {
	n := w.s.nodes[sch]
	if n == nil {
		return nil, false
	}
	for _, c := range n.closure {
		if cn := w.s.nodes[c]; cn != nil && cn.hasDef {
			return cn.def, true
		}
	}
	return nil, false
}

// propertySchemas returns the subschemas that apply to property k of an
// object to which set applies: properties, matching patternProperties, and
// additionalProperties when neither matched.
func (w walker) propertySchemas(set []*jsonschema.Schema, k string) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	for _, sch := range set {
		matched := false
		if ps, ok := sch.Properties[k]; ok {
			out = append(out, ps)
			matched = true
		}
		if n := w.s.nodes[sch]; n != nil {
			for _, p := range n.patterns {
				if p.re.MatchString(k) {
					out = append(out, p.schema)
					matched = true
				}
			}
		}
		if ap, ok := sch.AdditionalProperties.(*jsonschema.Schema); ok && !matched {
			out = append(out, ap)
		}
	}
	return out
}

// itemSchemas returns the subschemas that apply to item i of an array to
// which set applies.
func (w walker) itemSchemas(set []*jsonschema.Schema, i int) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	for _, sch := range set {
		if i < len(sch.PrefixItems) {
			out = append(out, sch.PrefixItems[i])
		} else if sch.Items2020 != nil {
			out = append(out, sch.Items2020)
		}
		switch items := sch.Items.(type) {
		case *jsonschema.Schema:
			out = append(out, items)
		case []*jsonschema.Schema:
			if i < len(items) {
				out = append(out, items[i])
			} else if ai, ok := sch.AdditionalItems.(*jsonschema.Schema); ok {
				out = append(out, ai)
			}
		}
	}
	return out
}
