package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/canon"
)

// Redacted replaces the value of a sensitive argument wherever arguments
// are shown.
const Redacted = "***"

// RedactArgs returns args (a JSON object, canonical arguments or an
// intent's raw ones) with the value of every sensitive argument present
// replaced by Redacted, and the paths it replaced. Arguments without
// sensitive fields come back as they are. Arguments that do not parse as a
// JSON object come back as nil when the tool has sensitive fields: nothing
// is shown rather than a value that might be one.
func (t *Tool) RedactArgs(args json.RawMessage) (json.RawMessage, []string) {
	if t == nil || len(t.Sensitive) == 0 {
		return args, nil
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil || doc == nil {
		return nil, nil
	}
	var redacted []string
	for _, path := range t.Sensitive {
		if redactPath(doc, strings.Split(path, ".")) {
			redacted = append(redacted, path)
		}
	}
	if len(redacted) == 0 {
		return args, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, redacted
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), redacted
}

// redactPath replaces the value at path (object keys, array indexes) and
// reports whether there was one. An array in the way without an index
// redacts the path in every element.
func redactPath(v any, path []string) bool {
	if len(path) == 0 {
		return false
	}
	switch n := v.(type) {
	case map[string]any:
		child, ok := n[path[0]]
		if !ok {
			return false
		}
		if len(path) == 1 {
			n[path[0]] = Redacted
			return true
		}
		return redactPath(child, path[1:])
	case []any:
		if i, err := strconv.Atoi(path[0]); err == nil {
			if i < 0 || i >= len(n) {
				return false
			}
			if len(path) == 1 {
				n[i] = Redacted
				return true
			}
			return redactPath(n[i], path[1:])
		}
		found := false
		for _, e := range n {
			found = redactPath(e, path) || found
		}
		return found
	}
	return false
}

// RedactIntent returns a raw intent's bytes with the sensitive arguments of
// its tool redacted, for the ledger to keep of a rejected intent: the
// intent's "args" object gets RedactArgs. ok is false when the bytes are an
// intent for a tool with sensitive arguments whose args cannot be found and
// redacted: keep none of the bytes then.
func (r *Registry) RedactIntent(body []byte) (out []byte, ok bool) {
	var head struct {
		Tool string          `json:"tool"`
		Args json.RawMessage `json:"args"`
	}
	if json.Unmarshal(body, &head) != nil {
		// Not even lenient JSON: a tool's sensitive field cannot be told
		// apart, so keep nothing if any tool has one.
		return body, !r.AnySensitive()
	}
	t, err := r.Tool(head.Tool)
	if err != nil {
		return body, !r.AnySensitive()
	}
	if len(t.Sensitive) == 0 {
		return body, true
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc map[string]any
	if dec.Decode(&doc) != nil {
		return nil, false
	}
	args, _ := t.RedactArgs(head.Args)
	if args == nil {
		return nil, false
	}
	doc["args"] = json.RawMessage(args)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(doc) != nil {
		return nil, false
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), true
}

// AnySensitive reports whether any tool has sensitive arguments.
func (r *Registry) AnySensitive() bool {
	for _, name := range r.Names() {
		if t, err := r.Tool(name); err == nil && len(t.Sensitive) > 0 {
			return true
		}
	}
	return false
}

// quietSensitive rewrites an argument error about a sensitive field so
// that it does not repeat the value (canon says ", got <value>" for enums,
// bounds and numbers).
func (t *Tool) quietSensitive(err error) error {
	var fe *canon.FieldError
	if len(t.Sensitive) == 0 || !errors.As(err, &fe) {
		return err
	}
	for _, s := range t.Sensitive {
		if fe.Path == s || strings.HasPrefix(fe.Path, s+".") {
			q := *fe
			if i := strings.Index(q.Reason, ", got "); i >= 0 {
				q.Reason = q.Reason[:i]
			}
			q.Reason += " (a sensitive argument: its value is not repeated)"
			return &q
		}
	}
	return err
}

// SensitiveValues returns the values of the sensitive arguments in args,
// as text (strings as they are, numbers and booleans as written), for a
// worker to keep them out of what a vendor's answer stores (see
// CallSecrets).
func (t *Tool) SensitiveValues(args json.RawMessage) []string {
	if t == nil || len(t.Sensitive) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil {
		return nil
	}
	var out []string
	for _, path := range t.Sensitive {
		collect(doc, strings.Split(path, "."), &out)
	}
	return out
}

func collect(v any, path []string, out *[]string) {
	if len(path) == 0 {
		switch x := v.(type) {
		case string:
			*out = append(*out, x)
		case json.Number:
			*out = append(*out, x.String())
		case map[string]any, []any:
			// A sensitive object or array: every scalar inside it.
			b, _ := json.Marshal(x)
			*out = append(*out, string(b))
			walkScalars(x, out)
		}
		return
	}
	switch n := v.(type) {
	case map[string]any:
		if c, ok := n[path[0]]; ok {
			collect(c, path[1:], out)
		}
	case []any:
		if i, err := strconv.Atoi(path[0]); err == nil {
			if i >= 0 && i < len(n) {
				collect(n[i], path[1:], out)
			}
			return
		}
		for _, e := range n {
			collect(e, path, out)
		}
	}
}

func walkScalars(v any, out *[]string) {
	switch x := v.(type) {
	case string:
		*out = append(*out, x)
	case json.Number:
		*out = append(*out, x.String())
	case map[string]any:
		for _, c := range x {
			walkScalars(c, out)
		}
	case []any:
		for _, c := range x {
			walkScalars(c, out)
		}
	}
}

// CallSecrets are the values a vendor's answer to a call of t with args
// must not be kept with (adapter.Redact): its sensitive arguments and the
// credentials its adapter sends.
func (t *Tool) CallSecrets(ad adapter.Adapter, args json.RawMessage) []string {
	out := t.SensitiveValues(args)
	if s, ok := ad.(adapter.Secrets); ok {
		out = append(out, s.Secrets()...)
	}
	return out
}
