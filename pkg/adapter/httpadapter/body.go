package httpadapter

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/opledger/opledger/pkg/adapter"
)

// bodyTemplate is a parsed BodyConfig.
type bodyTemplate struct {
	form        bool
	contentType string
	root        *bodyNode // an object; form bodies use only its first level
	needsArgs   bool
}

type bodyKind int

const (
	bodyLiteral bodyKind = iota // raw holds its JSON, text its form text
	bodyWhole                   // exactly one placeholder: the value, type kept
	bodyText                    // a string with placeholders
	bodyObject
	bodyArray
)

type bodyNode struct {
	kind   bodyKind
	field  string // the Config field, as in ConfigError.Field
	where  string // the vendor field, for call errors: metadata.order_id
	raw    []byte
	text   string
	parts  []tmplPart  // bodyWhole, bodyText
	names  []string    // bodyObject: sorted
	values []*bodyNode // bodyObject (in names order), bodyArray
}

const (
	contentTypeJSON = "application/json"
	contentTypeForm = "application/x-www-form-urlencoded"
)

func parseBody(cfg BodyConfig) (*bodyTemplate, error) {
	b := &bodyTemplate{contentType: contentTypeJSON}
	switch cfg.Encoding {
	case "", EncodingJSON:
	case EncodingForm:
		b.form, b.contentType = true, contentTypeForm
	default:
		return nil, &ConfigError{Field: "Body.Encoding", Reason: `must be "json" or "form"`}
	}
	if len(cfg.Fields) == 0 {
		return nil, &ConfigError{Field: "Body.Fields", Reason: "empty: a body template needs at least one field"}
	}
	root, err := b.object("Body.Fields", "", cfg.Fields)
	if err != nil {
		return nil, err
	}
	b.root = root
	b.needsArgs = root.readsArgs()
	return b, nil
}

func (b *bodyTemplate) object(field, where string, m map[string]any) (*bodyNode, error) {
	n := &bodyNode{kind: bodyObject, field: field, where: where, names: sortedKeys(m)}
	for _, name := range n.names {
		f := field + "[" + strconv.Quote(name) + "]"
		if name == "" {
			return nil, &ConfigError{Field: f, Reason: "empty field name"}
		}
		w := name
		if where != "" {
			w = where + "." + name
		}
		v, err := b.value(f, w, m[name])
		if err != nil {
			return nil, err
		}
		n.values = append(n.values, v)
	}
	return n, nil
}

func (b *bodyTemplate) value(field, where string, v any) (*bodyNode, error) {
	lit := func(raw []byte) (*bodyNode, error) {
		return &bodyNode{kind: bodyLiteral, field: field, where: where, raw: raw, text: string(raw)}, nil
	}
	flat := func(what string) error {
		return &ConfigError{Field: field, Reason: "form fields are flat, so a value cannot be " + what +
			`: name nested fields the way the vendor expects, e.g. "metadata[order_id]"`}
	}
	switch x := v.(type) {
	case string:
		parts, err := parseText(x)
		if err != nil {
			return nil, &ConfigError{Field: field, Reason: err.Error()}
		}
		switch {
		case len(parts) == 1 && parts[0].name != "":
			return &bodyNode{kind: bodyWhole, field: field, where: where, parts: parts}, nil
		case len(parts) > 1:
			return &bodyNode{kind: bodyText, field: field, where: where, parts: parts}, nil
		}
		s := ""
		if len(parts) == 1 {
			s = parts[0].lit
		}
		if !utf8.ValidString(s) {
			return nil, &ConfigError{Field: field, Reason: "not valid UTF-8"}
		}
		raw, _ := encodeJSON(s)
		n, _ := lit(raw)
		n.text = s
		return n, nil
	case bool:
		return lit([]byte(strconv.FormatBool(x)))
	case int:
		return lit(strconv.AppendInt(nil, int64(x), 10))
	case int64:
		return lit(strconv.AppendInt(nil, x, 10))
	case uint64:
		return lit(strconv.AppendUint(nil, x, 10))
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, &ConfigError{Field: field, Reason: "not a finite number"}
		}
		raw, _ := json.Marshal(x)
		return lit(raw)
	case json.Number:
		if _, err := x.Float64(); err != nil || !json.Valid([]byte(x)) {
			return nil, &ConfigError{Field: field, Reason: "not a JSON number"}
		}
		return lit([]byte(x))
	case nil:
		if b.form {
			return nil, &ConfigError{Field: field, Reason: "a form field cannot be null"}
		}
		return lit([]byte("null"))
	case map[string]any:
		if b.form {
			return nil, flat("an object")
		}
		return b.object(field, where, x)
	case []any:
		if b.form {
			return nil, flat("a list")
		}
		n := &bodyNode{kind: bodyArray, field: field, where: where}
		for i, item := range x {
			v, err := b.value(field+"["+strconv.Itoa(i)+"]", where+"["+strconv.Itoa(i)+"]", item)
			if err != nil {
				return nil, err
			}
			n.values = append(n.values, v)
		}
		return n, nil
	}
	return nil, &ConfigError{Field: field, Reason: "unsupported value: use a string, number, boolean, object, list or null"}
}

// parseText splits a body template string into literals and placeholders;
// {{ and }} are literal braces. Adjacent literals are merged, so a string
// without placeholders is one literal part (none when empty).
func parseText(s string) ([]tmplPart, error) {
	var parts []tmplPart
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			parts = append(parts, tmplPart{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "{{"):
			lit.WriteByte('{')
			i += 2
		case strings.HasPrefix(s[i:], "}}"):
			lit.WriteByte('}')
			i += 2
		case s[i] == '}':
			return nil, errors.New("unbalanced '}' before " + near(s[i:]) + " (write }} for a literal brace)")
		case s[i] == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, errors.New("unbalanced '{' at " + near(s[i:]) + " (write {{ for a literal brace)")
			}
			name := s[i+1 : i+end]
			if !validPlaceholder(name) {
				return nil, errors.New("invalid placeholder " + near(s[i:i+end+1]) +
					": a dotted argument path, {idempotency_key} or {operation_id}")
			}
			flush()
			p := tmplPart{name: name}
			if name != phIdempotencyKey && name != phOperationID {
				p.path = strings.Split(name, ".")
			}
			parts = append(parts, p)
			i += end + 1
		default:
			lit.WriteByte(s[i])
			i++
		}
	}
	flush()
	return parts, nil
}

func (n *bodyNode) readsArgs() bool {
	for _, p := range n.parts {
		if p.path != nil {
			return true
		}
	}
	for _, v := range n.values {
		if v.readsArgs() {
			return true
		}
	}
	return false
}

// placeholders appends the argument placeholders under n.
func (n *bodyNode) placeholders(out []Placeholder) []Placeholder {
	for _, p := range n.parts {
		if p.path != nil {
			out = append(out, Placeholder{Field: n.field, Arg: p.name})
		}
	}
	for _, v := range n.values {
		out = v.placeholders(out)
	}
	return out
}

// render builds the body for req. Its errors name the vendor field and the
// placeholder, never a value.
func (b *bodyTemplate) render(req adapter.Request) ([]byte, error) {
	var args any
	if b.needsArgs {
		var err error
		if args, err = parseJSON(req.Args); err != nil {
			return nil, errors.New("canonical args are not JSON")
		}
	}
	if b.form {
		form := url.Values{}
		for i, name := range b.root.names {
			n := b.root.values[i]
			s := n.text
			if n.kind != bodyLiteral {
				var err error
				if s, err = n.textValue(args, req); err != nil {
					return nil, err
				}
			}
			form.Set(name, s)
		}
		return []byte(form.Encode()), nil // sorted by name: the same args give the same bytes
	}
	var buf bytes.Buffer
	if err := b.root.writeJSON(&buf, args, req); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (n *bodyNode) writeJSON(buf *bytes.Buffer, args any, req adapter.Request) error {
	switch n.kind {
	case bodyLiteral:
		buf.Write(n.raw)
	case bodyWhole:
		v, err := n.parts[0].value(n.where, args, req)
		if err != nil {
			return err
		}
		raw, err := encodeJSON(v)
		if err != nil {
			return &errMissing{where: bodyWhere(n.where), name: n.parts[0].name, why: "cannot be encoded as JSON"}
		}
		buf.Write(raw)
	case bodyText:
		s, err := n.textValue(args, req)
		if err != nil {
			return err
		}
		raw, err := encodeJSON(s)
		if err != nil {
			return &errMissing{where: bodyWhere(n.where), name: n.parts[0].name, why: "cannot be encoded as JSON"}
		}
		buf.Write(raw)
	case bodyObject:
		buf.WriteByte('{')
		for i, name := range n.names {
			if i > 0 {
				buf.WriteByte(',')
			}
			key, _ := encodeJSON(name)
			buf.Write(key)
			buf.WriteByte(':')
			if err := n.values[i].writeJSON(buf, args, req); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case bodyArray:
		buf.WriteByte('[')
		for i, v := range n.values {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := v.writeJSON(buf, args, req); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	}
	return nil
}

// textValue renders a placeholder string as text: every placeholder must be
// a string, number or boolean.
func (n *bodyNode) textValue(args any, req adapter.Request) (string, error) {
	var b strings.Builder
	for _, p := range n.parts {
		if p.name == "" {
			b.WriteString(p.lit)
			continue
		}
		v, err := p.value(n.where, args, req)
		if err != nil {
			return "", err
		}
		s, ok := scalarString(v)
		if !ok {
			return "", &errMissing{where: bodyWhere(n.where), name: p.name, why: "is not a string, number or boolean"}
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

// value is the placeholder's value for req: an args value (as parseJSON
// decodes it) or a built-in string. Missing, null and empty built-ins fail.
func (p tmplPart) value(where string, args any, req adapter.Request) (any, error) {
	var v any
	switch {
	case p.path != nil:
		v = walk(args, p.path)
		if v == nil {
			return nil, &errMissing{where: bodyWhere(where), name: p.name, why: "is missing from the args"}
		}
		return v, nil
	case p.name == phIdempotencyKey:
		v = req.IdempotencyKey
	default:
		v = req.OperationID
	}
	if v == "" {
		return nil, &errMissing{where: bodyWhere(where), name: p.name, why: "is empty"}
	}
	return v, nil
}

func bodyWhere(field string) string { return "body field " + strconv.Quote(field) + ":" }

// encodeJSON encodes v without escaping <, > and & (a vendor gets the text as
// it is).
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
