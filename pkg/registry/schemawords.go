package registry

import (
	"slices"
	"strconv"
	"strings"
)

// JSON Schema ignores keywords it does not know: an args_schema with
// "propertes" or "requird" compiles, and checks nothing. The loader refuses
// them instead, naming the keyword it probably meant (rule 22 of
// docs/registry.md). Keys starting with "x-" are extensions, as in OpenAPI,
// and are let through.

// schemaKeywords are the keywords of JSON Schema drafts 4 to 2020-12 (a
// schema may declare an older draft with $schema).
var schemaKeywords = []string{
	// core
	"$schema", "$id", "id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor",
	"$vocabulary", "$comment", "$defs", "definitions",
	// applicators
	"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependencies",
	"prefixItems", "items", "additionalItems", "contains", "properties", "patternProperties",
	"additionalProperties", "propertyNames", "unevaluatedItems", "unevaluatedProperties",
	// validation
	"type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
	"maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "maxContains", "minContains",
	"maxProperties", "minProperties", "required", "dependentRequired",
	// annotations, format, content
	"title", "description", "default", "deprecated", "readOnly", "writeOnly", "examples",
	"format", "contentEncoding", "contentMediaType", "contentSchema",
}

// Where subschemas sit: keywords whose value is a schema, a list of schemas,
// or a mapping of names to schemas. Every other keyword's value is data
// (enum, const, default, examples, required) and is not walked.
var (
	schemaValued = []string{"not", "if", "then", "else", "additionalItems", "contains", "additionalProperties",
		"propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema", "items"}
	schemaListed = []string{"allOf", "anyOf", "oneOf", "prefixItems", "items"}
	schemaMapped = []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)

// schemaKeywordProblems reports every key of args_schema that is not a JSON
// Schema keyword, each at its dotted path under args_schema.
func (p *problems) schemaKeywordProblems(schema map[string]any) {
	var walk func(field string, v any)
	walk = func(field string, v any) {
		s, ok := v.(map[string]any)
		if !ok {
			return // true, false, or not a schema: CompileSchema says so
		}
		for _, k := range sortedKeys(s) {
			if !slices.Contains(schemaKeywords, k) && !strings.HasPrefix(k, "x-") {
				if s := suggest(k, schemaKeywordsLower()); s != "" {
					p.add(field+"."+k, "unknown JSON Schema keyword, which would check nothing; did you mean %s?", keywordSpelling(s))
				} else {
					p.add(field+"."+k, "unknown JSON Schema keyword, which would check nothing (extensions start with x-)")
				}
				continue
			}
			if slices.Contains(schemaMapped, k) {
				if m, ok := s[k].(map[string]any); ok {
					for _, name := range sortedKeys(m) {
						walk(field+"."+k+"."+name, m[name])
					}
				}
			}
			if slices.Contains(schemaValued, k) {
				walk(field+"."+k, s[k])
			}
			if slices.Contains(schemaListed, k) {
				if l, ok := s[k].([]any); ok {
					for i, sub := range l {
						walk(field+"."+k+"["+strconv.Itoa(i)+"]", sub)
					}
				}
			}
		}
	}
	walk("args_schema", schema)
}

// schemaKeywordsLower is schemaKeywords in lower case, as suggest compares.
func schemaKeywordsLower() []string {
	out := make([]string, len(schemaKeywords))
	for i, k := range schemaKeywords {
		out[i] = strings.ToLower(k)
	}
	return out
}

// keywordSpelling is the keyword whose lower case is lower.
func keywordSpelling(lower string) string {
	for _, k := range schemaKeywords {
		if strings.ToLower(k) == lower {
			return k
		}
	}
	return lower
}
