package registry

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The registry file is decoded here rather than by yaml.v3's typed decoder,
// which stops at the first unknown field and speaks of Go types ("field
// key_templat not found in type registry.fileTool"). This decoder walks the
// parsed YAML nodes by reflection over the yaml tags of the file structs
// (the same tags the schema and docs tests read), reports every problem in
// the registry's own terms with its line, and keeps going.

// maxNodes bounds the values decoded from one file, aliases expanded: a few
// lines of nested aliases can otherwise stand for billions of values.
const maxNodes = 1_000_000

// toolNode is where a tool is written: its name and its definition.
type toolNode struct {
	key, value *yaml.Node
}

// decoded is one source after decoding.
type decoded struct {
	doc   fileDoc
	root  *yaml.Node          // the document's mapping
	tools map[string]toolNode // first definition of each tool in the file
	order []string            // tool names in file order
	// hooks and hookOrder are the same for the webhooks section's providers.
	hooks     map[string]toolNode
	hookOrder []string
	// shadow holds, per tool ("" for the document), fields whose own
	// problem was already reported here (a type error, or a misspelling
	// with a suggestion), so compile's "is required" or "must be ≥ 1" for
	// the zero value left behind is not reported as well.
	shadow map[string][]string
}

type decoder struct {
	file   string
	probs  []Problem
	shadow map[string][]string
	nodes  int
	full   bool // maxNodes reached; reported once
}

// at says where in the document a value is: the tool ("" for the document
// itself) and the dotted field path within it.
type at struct {
	tool  string
	field string
}

func (c at) child(name string) at {
	if c.tool == "" && c.field == "tools" {
		return at{tool: name} // the keys of tools are tool names
	}
	if c.field == "" {
		return at{tool: c.tool, field: name}
	}
	return at{tool: c.tool, field: c.field + "." + name}
}

func (c at) index(i int) at {
	return at{tool: c.tool, field: c.field + "[" + strconv.Itoa(i) + "]"}
}

func (d *decoder) add(n *yaml.Node, c at, format string, args ...any) {
	p := Problem{File: d.file, Tool: c.tool, Field: c.field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		p.Line = n.Line
	}
	d.probs = append(d.probs, p)
}

// shade records that field of tool already has its problem.
func (d *decoder) shade(c at) {
	d.shadow[c.tool] = append(d.shadow[c.tool], c.field)
}

// decodeSource parses and decodes one registry file. It returns nil when
// nothing usable was found (not YAML, not a mapping); the problems say why.
func decodeSource(src Source) (*decoded, []Problem) {
	d := &decoder{file: src.Name, shadow: map[string][]string{}}
	dec := yaml.NewDecoder(bytes.NewReader(src.Data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			d.add(nil, at{}, "the file is empty: it needs version: 1 and tools")
		} else {
			d.add(nil, at{}, "not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		return nil, d.probs
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := 0
		if err == nil {
			line = next.Line
		}
		d.add(&yaml.Node{Line: line}, at{}, "a registry file holds one YAML document; put each in a file of its own")
	}
	n := &root
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	n = resolve(n)
	if isNull(n) {
		d.add(n, at{}, "the file is empty: it needs version: 1 and tools")
		return nil, d.probs
	}
	if n.Kind != yaml.MappingNode {
		d.add(n, at{}, "the file must be a mapping with version and tools, got %s", got(n))
		return nil, d.probs
	}
	out := &decoded{root: n, tools: map[string]toolNode{}, hooks: map[string]toolNode{}, shadow: d.shadow}
	d.decode(n, reflect.ValueOf(&out.doc).Elem(), at{})
	for _, sec := range []struct {
		key   string
		nodes map[string]toolNode
		order *[]string
	}{{"tools", out.tools, &out.order}, {"webhooks", out.hooks, &out.hookOrder}} {
		tn, ok := lookupKey(n, sec.key)
		if !ok {
			continue
		}
		if m := resolve(tn.value); m.Kind == yaml.MappingNode {
			for _, e := range entries(m) {
				if _, dup := sec.nodes[e.key.Value]; !dup {
					sec.nodes[e.key.Value] = toolNode(e)
					*sec.order = append(*sec.order, e.key.Value)
				}
			}
		}
	}
	return out, d.probs
}

// decode sets v from n, reporting what does not fit.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, c at) {
	n = resolve(n)
	if !d.count(n) || isNull(n) {
		return // null leaves the zero value: the field is absent
	}
	switch v.Kind() {
	case reflect.Pointer:
		e := reflect.New(v.Type().Elem())
		d.decode(n, e.Elem(), c)
		v.Set(e)
	case reflect.Struct:
		d.object(n, v, c)
	case reflect.Map:
		d.mapping(n, v, c)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.mismatch(n, c, "a list")
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			if isNull(resolve(item)) {
				d.add(item, c.index(i), "must not be empty")
				continue
			}
			d.decode(item, s.Index(i), c.index(i))
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.mismatch(n, c, "a string")
			return
		}
		v.SetString(n.Value)
	case reflect.Int, reflect.Int64:
		var i int64
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
			d.mismatch(n, c, "an integer")
			return
		}
		if err := n.Decode(&i); err != nil || v.OverflowInt(i) {
			d.add(n, c, "is too large: %s", n.Value)
			d.shade(c)
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		var f float64
		if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
			d.mismatch(n, c, "a number")
			return
		}
		if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			d.add(n, c, "must be a finite number, got %s", n.Value)
			d.shade(c)
			return
		}
		v.SetFloat(f)
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			d.mismatch(n, c, "true or false")
			return
		}
		if err := n.Decode(&b); err != nil {
			d.mismatch(n, c, "true or false")
			return
		}
		v.SetBool(b)
	case reflect.Interface:
		if x := d.value(n, c); x != nil {
			v.Set(reflect.ValueOf(x))
		}
	default:
		panic("registry: cannot decode into " + v.Type().String()) // a file struct the decoder does not know
	}
}

// object decodes a mapping into a file struct: each key must be one of its
// yaml tags.
func (d *decoder) object(n *yaml.Node, v reflect.Value, c at) {
	if n.Kind != yaml.MappingNode {
		d.mismatch(n, c, "a mapping")
		return
	}
	fields := yamlFields(v.Type())
	for _, e := range d.entries(n, c) {
		i, ok := fields[e.key.Value]
		if !ok {
			d.unknown(e.key, c, v.Type())
			continue
		}
		d.decode(e.value, v.Field(i), c.child(e.key.Value))
	}
}

// mapping decodes a mapping into a map with string keys.
func (d *decoder) mapping(n *yaml.Node, v reflect.Value, c at) {
	if n.Kind != yaml.MappingNode {
		d.mismatch(n, c, "a mapping")
		return
	}
	m := reflect.MakeMap(v.Type())
	for _, e := range d.entries(n, c) {
		elem := reflect.New(v.Type().Elem()).Elem()
		d.decode(e.value, elem, c.child(e.key.Value))
		m.SetMapIndex(reflect.ValueOf(e.key.Value), elem)
	}
	v.Set(m)
}

// value decodes a free-form value (args_schema, body fields) into the Go
// values JSON has: map[string]any, []any, string, int64, uint64, float64,
// bool and nil.
func (d *decoder) value(n *yaml.Node, c at) any {
	n = resolve(n)
	if !d.count(n) {
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		if unquotedTemplate(n) {
			d.add(n, c, `a template in braces must be quoted, like "{%s}" (write {%s: null} for a mapping)`,
				n.Content[0].Value, n.Content[0].Value)
			d.shade(c)
			return nil
		}
		m := map[string]any{}
		for _, e := range d.entries(n, c) {
			m[e.key.Value] = d.value(e.value, c.child(e.key.Value))
		}
		return m
	case yaml.SequenceNode:
		a := make([]any, len(n.Content))
		for i, item := range n.Content {
			a[i] = d.value(item, c.index(i))
		}
		return a
	}
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if n.Decode(&b) == nil {
			return b
		}
	case "!!int":
		var i int64
		if n.Decode(&i) == nil {
			return i
		}
		var u uint64
		if n.Decode(&u) == nil {
			return u
		}
		d.add(n, c, "is too large: %s", n.Value)
		d.shade(c)
		return nil
	case "!!float":
		var f float64
		if n.Decode(&f) == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return f
		}
		d.add(n, c, "must be a finite number, got %s", n.Value)
		d.shade(c)
		return nil
	case "!!str", "!!timestamp":
		return n.Value
	}
	d.add(n, c, "unsupported YAML tag %s", n.Tag)
	d.shade(c)
	return nil
}

type entry struct {
	key, value *yaml.Node
}

// entries returns the key/value pairs of mapping n with YAML merge keys
// (<<) expanded, reporting keys that are not plain text, keys given twice
// and merges of anything but mappings. A key written in n wins over a merged
// one, and an earlier merged mapping over a later one, as YAML says.
func (d *decoder) entries(n *yaml.Node, c at) []entry {
	var out []entry
	seen := map[string]*yaml.Node{}
	var merged []entry
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			m, ok := mergeEntries(v)
			if !ok {
				d.add(k, c, "<< must merge a mapping or a list of mappings")
			}
			merged = append(merged, m...)
			continue
		}
		if k.Kind != yaml.ScalarNode || isNull(k) {
			d.add(k, c, "a key must be plain text, got %s", got(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			where := c.child(k.Value)
			if where.field == "" {
				d.add(k, where, "defined twice (first at line %d)", first.Line)
			} else {
				d.add(k, where, "given twice (first at line %d)", first.Line)
			}
			continue
		}
		seen[k.Value] = k
		out = append(out, entry{k, v})
	}
	for _, e := range merged {
		if _, ok := seen[e.key.Value]; !ok {
			seen[e.key.Value] = e.key
			out = append(out, e)
		}
	}
	return out
}

// mergeEntries returns the pairs a merge key brings in; false when v is not
// a mapping or a list of mappings.
func mergeEntries(v *yaml.Node) ([]entry, bool) {
	v = resolve(v)
	switch v.Kind {
	case yaml.MappingNode:
		return entries(v), true
	case yaml.SequenceNode:
		var out []entry
		for _, item := range v.Content {
			item = resolve(item)
			if item.Kind != yaml.MappingNode {
				return nil, false
			}
			out = append(out, entries(item)...)
		}
		return out, true
	}
	return nil, false
}

// entries returns the pairs of a mapping as the decoder sees them, without
// reporting anything (for looking things up after decoding).
func entries(n *yaml.Node) []entry {
	quiet := &decoder{shadow: map[string][]string{}}
	return quiet.entries(n, at{})
}

// lookupKey finds key in mapping n.
func lookupKey(n *yaml.Node, key string) (entry, bool) {
	for _, e := range entries(n) {
		if e.key.Value == key {
			return e, true
		}
	}
	return entry{}, false
}

// unknown reports a key that is not a field of struct type t, suggesting the
// closest field when one is close enough to be a misspelling.
func (d *decoder) unknown(key *yaml.Node, c at, t reflect.Type) {
	var names []string
	for name := range yamlFields(t) {
		names = append(names, name)
	}
	if s := suggest(key.Value, names); s != "" {
		d.add(key, c, "unknown field %s; did you mean %s?", printable(key.Value), s)
		d.shade(c.child(s))
		return
	}
	slices.Sort(names)
	d.add(key, c, "unknown field %s; the fields here are %s", printable(key.Value), strings.Join(names, ", "))
}

// mismatch reports a value of the wrong kind, in YAML's terms.
func (d *decoder) mismatch(n *yaml.Node, c at, want string) {
	msg := "must be " + want + ", got " + got(n)
	if want == "a string" && unquotedTemplate(n) {
		k := n.Content[0].Value
		msg += fmt.Sprintf(`: a template in braces must be quoted, like "{%s}"`, k)
	}
	d.add(n, c, "%s", msg)
	d.shade(c)
}

// unquotedTemplate reports whether n is what YAML makes of an unquoted
// {order_id}: a flow mapping with one key and no value at all ({x: null}
// is written on purpose).
func unquotedTemplate(n *yaml.Node) bool {
	if n.Kind != yaml.MappingNode || n.Style&yaml.FlowStyle == 0 || len(n.Content) != 2 {
		return false
	}
	k, v := n.Content[0], n.Content[1]
	return k.Kind == yaml.ScalarNode && v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" && v.Value == ""
}

// got describes a value for a problem message.
func got(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	if isNull(n) {
		return "nothing"
	}
	if n.ShortTag() == "!!str" {
		return quote(n.Value)
	}
	return cut(n.Value) // a number or boolean as written
}

// cut shortens s to a readable length for a message.
func cut(s string) string {
	const max = 40
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "…"
	}
	return s
}

// quote quotes a value for a message, cut to a readable length.
func quote(s string) string { return strconv.Quote(cut(s)) }

// printable shows a key for a message: as it is when it is a plain word
// (unknown field key_templat), quoted otherwise.
func printable(s string) string {
	q := quote(s)
	if q == `"`+s+`"` && s != "" && !strings.ContainsAny(s, " :;,{}[]#\"'") {
		return s
	}
	return q
}

func (d *decoder) count(n *yaml.Node) bool {
	if d.full {
		return false
	}
	if d.nodes++; d.nodes > maxNodes {
		d.full = true
		d.add(n, at{}, "the file holds more than %d values once its aliases are expanded", maxNodes)
		return false
	}
	return true
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// yamlFields maps the yaml names of struct type t to field indexes.
func yamlFields(t reflect.Type) map[string]int {
	out := map[string]int{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			out[name] = i
		}
	}
	return out
}

// suggest returns the name in known closest to name by edit distance, when
// it is close enough to be a misspelling of it; "" otherwise.
func suggest(name string, known []string) string {
	norm := strings.ReplaceAll(strings.ToLower(name), "-", "_")
	best, bestD := "", math.MaxInt
	for _, k := range known {
		if dist := editDistance(norm, k); dist < bestD || (dist == bestD && k < best) {
			best, bestD = k, dist
		}
	}
	limit := 2
	if len(best) >= 12 {
		limit = 3
	}
	if best == "" || bestD > limit || bestD >= len(norm) {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and transpositions of adjacent
// bytes each cost one.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
