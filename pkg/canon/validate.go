package canon

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// validationError turns the library's error tree into one *FieldError about
// the most specific problem: the deepest instance location, the first such
// in the library's order. The library's own messages are never used, since
// they repeat values.
func validationError(err error) error {
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &FieldError{Reason: "does not satisfy the schema"}
	}
	c := mostSpecific(ve)
	path, reason := describe(c)
	return &FieldError{Path: formatPath(path), Reason: reason}
}

// mostSpecific picks the error to report from a validation error tree.
func mostSpecific(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		return e
	}
	var best *jsonschema.ValidationError
	bestDepth := -1
	for _, cause := range e.Causes {
		c := mostSpecific(cause)
		if d := len(errorPath(c)); d > bestDepth {
			best, bestDepth = c, d
		}
	}
	switch e.ErrorKind.(type) {
	case *kind.AnyOf, *kind.OneOf:
		// An error inside one alternative is only worth naming when it is
		// below the value that matched no alternative; otherwise say that.
		if bestDepth <= len(e.InstanceLocation) {
			return e
		}
	}
	return best
}

// errorPath is the instance location an error is about, extended by the
// field name for errors that concern one field of an object.
func errorPath(e *jsonschema.ValidationError) []string {
	path := e.InstanceLocation
	var field string
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		field = first(k.Missing)
	case *kind.DependentRequired:
		field = first(k.Missing)
	case *kind.Dependency:
		field = first(k.Missing)
	case *kind.AdditionalProperties:
		field = first(k.Properties)
	case *kind.PropertyNames:
		field = k.Property
	default:
		return path
	}
	return append(path[:len(path):len(path)], field)
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// describe returns the path and a plain-words reason for one error.
func describe(e *jsonschema.ValidationError) ([]string, string) {
	path := errorPath(e)
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		want := make([]string, len(k.Want))
		for i, t := range k.Want {
			want[i] = withArticle(t)
		}
		return path, "must be " + strings.Join(want, " or ") + ", got " + withArticle(k.Got)
	case *kind.Required:
		return path, "is required" + others("also missing", rest(k.Missing))
	case *kind.DependentRequired:
		return path, "is required when " + strconv.Quote(k.Prop) + " is present"
	case *kind.Dependency:
		return path, "is required when " + strconv.Quote(k.Prop) + " is present"
	case *kind.AdditionalProperties:
		return path, "is not a field of this object" + others("also unknown", rest(k.Properties))
	case *kind.PropertyNames:
		return path, "is not an allowed field name"
	case *kind.Enum:
		return path, "must be one of " + list(k.Want) + ", got " + show(k.Got)
	case *kind.Const:
		return path, "must be " + show(k.Want)
	case *kind.Format:
		return path, "must be a valid " + k.Want
	case *kind.Pattern:
		return path, "does not match the pattern " + strconv.Quote(cutRunes(k.Want, 64))
	case *kind.MinLength:
		return path, fmt.Sprintf("must be at least %d characters long, got %d", k.Want, k.Got)
	case *kind.MaxLength:
		return path, fmt.Sprintf("must be at most %d characters long, got %d", k.Want, k.Got)
	case *kind.Minimum:
		return path, "must be at least " + ratText(k.Want) + ", got " + ratText(k.Got)
	case *kind.Maximum:
		return path, "must be at most " + ratText(k.Want) + ", got " + ratText(k.Got)
	case *kind.ExclusiveMinimum:
		return path, "must be greater than " + ratText(k.Want) + ", got " + ratText(k.Got)
	case *kind.ExclusiveMaximum:
		return path, "must be less than " + ratText(k.Want) + ", got " + ratText(k.Got)
	case *kind.MultipleOf:
		return path, "must be a multiple of " + ratText(k.Want)
	case *kind.MinItems:
		return path, fmt.Sprintf("must have at least %d items, got %d", k.Want, k.Got)
	case *kind.MaxItems:
		return path, fmt.Sprintf("must have at most %d items, got %d", k.Want, k.Got)
	case *kind.UniqueItems:
		return path, fmt.Sprintf("must not repeat an item (items %d and %d are equal)", k.Duplicates[0], k.Duplicates[1])
	case *kind.MinProperties:
		return path, fmt.Sprintf("must have at least %d fields, got %d", k.Want, k.Got)
	case *kind.MaxProperties:
		return path, fmt.Sprintf("must have at most %d fields, got %d", k.Want, k.Got)
	case *kind.FalseSchema:
		return path, "is not allowed"
	case *kind.Not:
		return path, "matches a schema it must not match"
	case *kind.AnyOf:
		return path, "does not match any of the allowed alternatives (anyOf)"
	case *kind.OneOf:
		if len(k.Subschemas) > 1 {
			return path, fmt.Sprintf("matches more than one alternative of oneOf (%d and %d)", k.Subschemas[0], k.Subschemas[1])
		}
		return path, "does not match any of the allowed alternatives (oneOf)"
	}
	return path, "does not satisfy the schema keyword " + strconv.Quote(strings.Join(e.ErrorKind.KeywordPath(), "/"))
}

func rest(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s[1:]
}

func withArticle(t string) string {
	switch t {
	case "null":
		return "null"
	case "integer", "object", "array":
		return "an " + t
	}
	return "a " + t
}

// others lists further field names (at most five) after a reason.
func others(label string, names []string) string {
	if len(names) == 0 {
		return ""
	}
	shown := make([]string, 0, 5)
	for i, n := range names {
		if i == 5 {
			shown = append(shown, "…")
			break
		}
		shown = append(shown, formatPath([]string{n}))
	}
	return " (" + label + ": " + strings.Join(shown, ", ") + ")"
}

// list shows schema values (an enum) compactly: at most ten.
func list(values []any) string {
	shown := make([]string, 0, 10)
	for i, v := range values {
		if i == 10 {
			shown = append(shown, "…")
			break
		}
		if s, ok := v.(string); ok && len(s) <= maxShown {
			shown = append(shown, s)
			continue
		}
		shown = append(shown, show(v))
	}
	return strings.Join(shown, ", ")
}

// ratText prints a bound or a value from a numeric keyword error.
func ratText(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	var s string
	if r.IsInt() {
		s = r.Num().String()
	} else {
		f, _ := r.Float64()
		s = formatES6(f)
	}
	return show(Number(s))
}
