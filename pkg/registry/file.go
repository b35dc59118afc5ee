package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/opledger/opledger/pkg/adapter/httpadapter"
	"github.com/opledger/opledger/pkg/canon"
	"github.com/opledger/opledger/pkg/op"
)

// fileDoc is the YAML document as written by operators; compile turns each
// fileTool into a validated Tool.
type fileDoc struct {
	Version int                  `yaml:"version"`
	Tools   map[string]*fileTool `yaml:"tools"`
}

type fileTool struct {
	Description     string         `yaml:"description"`
	SideEffectClass string         `yaml:"side_effect_class"`
	Version         int            `yaml:"version"`
	Intent          string         `yaml:"intent"`
	Entity          *fileEntity    `yaml:"entity"`
	KeyTemplate     string         `yaml:"key_template"`
	ArgsSchema      map[string]any `yaml:"args_schema"`
	Timeout         string         `yaml:"timeout"`
	Retry           *fileRetry     `yaml:"retry"`
	Lease           *fileLease     `yaml:"lease"`
	Approval        *fileApproval  `yaml:"approval"`
	Dedupe          *fileDedupe    `yaml:"dedupe"`
	Adapter         *fileAdapter   `yaml:"adapter"`
	Compensation    *Compensation  `yaml:"compensation"`
}

type fileEntity struct {
	Type string `yaml:"type"`
	ID   string `yaml:"id"`
}

type fileRetry struct {
	MaxAttempts    int     `yaml:"max_attempts"`
	InitialBackoff string  `yaml:"initial_backoff"`
	MaxBackoff     string  `yaml:"max_backoff"`
	Jitter         float64 `yaml:"jitter"`
}

type fileLease struct {
	Required bool   `yaml:"required"`
	TTL      string `yaml:"ttl"`
}

type fileApproval struct {
	When      string `yaml:"when"`
	Field     string `yaml:"field"`
	Threshold int64  `yaml:"threshold"`
}

type fileDedupe struct {
	Window      string `yaml:"window"`
	KeyTemplate string `yaml:"key_template"`
}

type fileAdapter struct {
	Type              string            `yaml:"type"`
	Vendor            string            `yaml:"vendor"`
	Method            string            `yaml:"method"`
	Path              string            `yaml:"path"`
	Headers           map[string]string `yaml:"headers"`
	IdempotencyHeader string            `yaml:"idempotency_header"`
	ReferenceHeader   string            `yaml:"reference_header"`
	StatusOutcomes    map[string]string `yaml:"status_outcomes"`
	ExternalIDPointer string            `yaml:"external_id_pointer"`
	RequestIDHeader   string            `yaml:"request_id_header"`
	ReplayedHeader    string            `yaml:"replayed_header"`
	Lookup            *fileLookup       `yaml:"lookup"`
}

type fileLookup struct {
	Method            string   `yaml:"method"`
	Path              string   `yaml:"path"`
	FoundStatus       int      `yaml:"found_status"`
	NotFoundStatus    int      `yaml:"not_found_status"`
	ExternalIDPointer string   `yaml:"external_id_pointer"`
	StatusPointer     string   `yaml:"status_pointer"`
	PendingValues     []string `yaml:"pending_values"`
	SucceededValues   []string `yaml:"succeeded_values"`
	FailedValues      []string `yaml:"failed_values"`
}

// problems collects the problems of one tool.
type problems struct {
	tool string
	list []Problem
}

func (p *problems) add(field, format string, args ...any) {
	p.list = append(p.list, Problem{Tool: p.tool, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (p *problems) duration(field, s string, def time.Duration) time.Duration {
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		p.add(field, "must be a duration like 500ms or 5s, got %q", s)
		return def
	}
	return d
}

func (ft *fileTool) compile(name string, opts Options) (*Tool, []Problem) {
	p := &problems{tool: name}
	if ft == nil {
		p.add("", "empty definition")
		return nil, p.list
	}
	t := &Tool{Name: name, Description: ft.Description, Class: op.SideEffectClass(ft.SideEffectClass),
		Version: ft.Version, Intent: ft.Intent}
	if !t.Class.Valid() {
		p.add("side_effect_class", "must be one of %v, got %q", op.Classes, ft.SideEffectClass)
	}
	if t.Version < 1 {
		p.add("version", "must be an integer ≥ 1, got %d", ft.Version)
	}
	if t.Intent == "" {
		t.Intent = name
	}

	// Arguments schema: compiled once, used for every canonicalization.
	if ft.ArgsSchema == nil {
		p.add("args_schema", "is required (a JSON Schema object)")
	} else if raw, err := json.Marshal(ft.ArgsSchema); err != nil {
		p.add("args_schema", "cannot be expressed as JSON: %v", err)
	} else if s, err := canon.CompileSchema(name, raw); err != nil {
		p.add("args_schema", "%v", err)
	} else {
		t.schema, t.ArgsSchema = s, raw
	}

	// Idempotency key template.
	if ft.KeyTemplate == "" {
		// A read without a template is keyed by its tool and canonical args hash.
		if t.Class != op.ClassPureRead {
			p.add("key_template", "is required for a %s tool", t.Class)
		}
	} else if tmpl, err := canon.ParseTemplate(ft.KeyTemplate); err != nil {
		p.add("key_template", "%v", err)
	} else {
		t.key = tmpl
		p.checkFields("key_template", tmpl, ft.ArgsSchema)
	}

	if ft.Entity != nil {
		t.EntityType = ft.Entity.Type
		if ft.Entity.Type == "" || ft.Entity.ID == "" {
			p.add("entity", "needs both type and id")
		} else if tmpl, err := canon.ParseTemplate(ft.Entity.ID); err != nil {
			p.add("entity.id", "%v", err)
		} else {
			t.entityID = tmpl
			p.checkFields("entity.id", tmpl, ft.ArgsSchema)
		}
	}

	t.Timeout = p.duration("timeout", ft.Timeout, 10*time.Second)
	if t.Timeout == 0 {
		p.add("timeout", "must be positive")
	}

	t.Retry = RetryPolicy{MaxAttempts: 1, InitialBackoff: 200 * time.Millisecond, MaxBackoff: 10 * time.Second, Jitter: 0.2}
	if r := ft.Retry; r != nil {
		t.Retry.MaxAttempts = r.MaxAttempts
		t.Retry.InitialBackoff = p.duration("retry.initial_backoff", r.InitialBackoff, t.Retry.InitialBackoff)
		t.Retry.MaxBackoff = p.duration("retry.max_backoff", r.MaxBackoff, t.Retry.MaxBackoff)
		t.Retry.Jitter = r.Jitter
		if r.MaxAttempts < 1 || r.MaxAttempts > 100 {
			p.add("retry.max_attempts", "must be between 1 and 100, got %d", r.MaxAttempts)
		}
		if r.Jitter < 0 || r.Jitter > 1 {
			p.add("retry.jitter", "must be between 0 and 1, got %v", r.Jitter)
		}
		if t.Retry.MaxBackoff < t.Retry.InitialBackoff {
			p.add("retry.max_backoff", "must not be below retry.initial_backoff")
		}
	}

	if l := ft.Lease; l != nil {
		t.Lease = LeasePolicy{Required: l.Required, TTL: p.duration("lease.ttl", l.TTL, 2*t.Timeout)}
		if l.Required && t.entityID == nil {
			p.add("lease.required", "an entity lease needs entity.type and entity.id")
		}
	}

	t.Approval = ApprovalRule{When: "never"}
	if a := ft.Approval; a != nil {
		t.Approval = ApprovalRule{When: a.When, Field: a.Field, Threshold: a.Threshold}
		switch a.When {
		case "never", "always":
		case "above":
			if a.Field == "" {
				p.add("approval.field", "is required when approval.when is above")
			} else if !schemaHasField(ft.ArgsSchema, a.Field, "integer") {
				p.add("approval.field", "must name an integer argument, %q is not one", a.Field)
			}
		default:
			p.add("approval.when", "must be never, always or above, got %q", a.When)
		}
	}
	if t.Class == op.ClassExternalIrreversible && t.Approval.When == "never" && ft.Approval == nil {
		// Irreversible tools state their approval rule explicitly, even if it is "never".
		p.add("approval", "an external_irreversible tool must state its approval rule")
	}

	if d := ft.Dedupe; d != nil {
		t.Dedupe.Window = p.duration("dedupe.window", d.Window, 0)
		if t.Dedupe.Window <= 0 {
			p.add("dedupe.window", "must be a positive duration")
		}
		if tmpl, err := canon.ParseTemplate(d.KeyTemplate); err != nil {
			p.add("dedupe.key_template", "%v", err)
		} else {
			t.Dedupe.key = tmpl
			p.checkFields("dedupe.key_template", tmpl, ft.ArgsSchema)
		}
	}

	p.adapter(t, ft.Adapter, opts)

	if c := ft.Compensation; c != nil {
		if c.Tool == "" {
			p.add("compensation.tool", "is required")
		}
		if t.Class == op.ClassPureRead {
			p.add("compensation", "a pure_read tool has nothing to compensate")
		}
		for arg, tmpl := range c.Args {
			if _, err := canon.ParseTemplate(tmpl); err != nil {
				p.add("compensation.args."+arg, "%v", err)
			}
		}
		t.Compensation = c
	}
	return t, p.list
}

func (p *problems) adapter(t *Tool, fa *fileAdapter, opts Options) {
	if fa == nil {
		p.add("adapter", "is required")
		return
	}
	t.Adapter.Type = fa.Type
	if fa.Type != "http" {
		p.add("adapter.type", "must be http (the only adapter so far), got %q", fa.Type)
		return
	}
	base := opts.vendorURL(fa.Vendor)
	if fa.Vendor == "" {
		p.add("adapter.vendor", "is required")
	} else if base == "" {
		p.add("adapter.vendor", "no base URL for vendor %q (opledger's binaries read it from OPLEDGER_VENDOR_%s_URL)", fa.Vendor, strings.ToUpper(fa.Vendor))
	} else if u, err := url.Parse(base); err != nil || u.Scheme == "" || u.Host == "" {
		p.add("adapter.vendor", "base URL for vendor %q is not an absolute URL", fa.Vendor)
	}
	if !strings.HasPrefix(fa.Path, "/") {
		p.add("adapter.path", "must start with /, got %q", fa.Path)
	}
	t.Adapter.Vendor = fa.Vendor
	t.Adapter.VendorIdempotency = fa.IdempotencyHeader != ""
	if t.Class == op.ClassExternalIdempotent && fa.IdempotencyHeader == "" {
		p.add("adapter.idempotency_header", "an external_idempotent tool must pass our key to the vendor")
	}
	cfg := httpadapter.Config{
		Method: fa.Method, URL: strings.TrimRight(base, "/") + fa.Path, Headers: fa.Headers,
		IdempotencyHeader: fa.IdempotencyHeader, ReferenceHeader: fa.ReferenceHeader, Timeout: t.Timeout,
		ExternalIDPointer: fa.ExternalIDPointer, RequestIDHeader: fa.RequestIDHeader, ReplayedHeader: fa.ReplayedHeader,
		Secret: opts.Secret,
	}
	if len(fa.StatusOutcomes) > 0 {
		cfg.StatusOutcomes = map[string]op.Outcome{}
		for code, o := range fa.StatusOutcomes {
			cfg.StatusOutcomes[code] = op.Outcome(o)
		}
	}
	if l := fa.Lookup; l != nil {
		if !strings.HasPrefix(l.Path, "/") {
			p.add("adapter.lookup.path", "must start with /, got %q", l.Path)
		}
		p.lookupValues(l)
		cfg.Lookup = &httpadapter.LookupConfig{
			Method: l.Method, URL: strings.TrimRight(base, "/") + l.Path, FoundStatus: l.FoundStatus,
			NotFoundStatus: l.NotFoundStatus, ExternalIDPointer: l.ExternalIDPointer,
			StatusPointer: l.StatusPointer, PendingValues: l.PendingValues,
			SucceededValues: l.SucceededValues, FailedValues: l.FailedValues,
		}
	} else if t.Class == op.ClassExternalIrreversible || t.Class == op.ClassExternalNonIdempotent {
		p.add("adapter.lookup", "a %s tool needs a lookup so ambiguous outcomes can be reconciled", t.Class)
	}
	if base != "" {
		// Validate the whole adapter config the way it will be used.
		if _, err := httpadapter.New(cfg, nil); err != nil {
			p.configError(err)
		}
	}
	t.Adapter.HTTP = cfg
}

// lookupValues reports every problem with the lookup's status value lists,
// each under its own field: httpadapter.New stops at the first.
func (p *problems) lookupValues(l *fileLookup) {
	lists := []struct {
		field  string
		values []string
	}{
		{"adapter.lookup.pending_values", l.PendingValues},
		{"adapter.lookup.failed_values", l.FailedValues},
		{"adapter.lookup.succeeded_values", l.SucceededValues},
	}
	seen := map[string]string{} // value -> field of the first list holding it
	for _, list := range lists {
		if len(list.values) > 0 && l.StatusPointer == "" {
			p.add(list.field, "needs adapter.lookup.status_pointer")
		}
		for _, v := range list.values {
			if v == "" {
				p.add(list.field, "contains an empty value")
				continue
			}
			if other, dup := seen[v]; dup && other != list.field {
				p.add(list.field, "%q is also in %s", v, other)
				continue
			}
			seen[v] = list.field
		}
	}
}

// configFields maps httpadapter.ConfigError fields to registry fields.
var configFields = map[string]string{
	"Method": "adapter.method", "URL": "adapter.path", "Headers": "adapter.headers",
	"IdempotencyHeader": "adapter.idempotency_header", "ReferenceHeader": "adapter.reference_header",
	"RequestIDHeader": "adapter.request_id_header", "ReplayedHeader": "adapter.replayed_header",
	"Timeout": "timeout", "StatusOutcomes": "adapter.status_outcomes", "ExternalIDPointer": "adapter.external_id_pointer",
	"Lookup.Method": "adapter.lookup.method", "Lookup.URL": "adapter.lookup.path",
	"Lookup.FoundStatus": "adapter.lookup.found_status", "Lookup.NotFoundStatus": "adapter.lookup.not_found_status",
	"Lookup.ExternalIDPointer": "adapter.lookup.external_id_pointer", "Lookup.StatusPointer": "adapter.lookup.status_pointer",
	"Lookup.PendingValues": "adapter.lookup.pending_values", "Lookup.FailedValues": "adapter.lookup.failed_values",
	"Lookup.SucceededValues": "adapter.lookup.succeeded_values",
}

// configError reports an httpadapter.New error under the registry field it
// is about, unless that field already has a problem (found by compile
// itself); an error naming no known field is reported under "adapter".
func (p *problems) configError(err error) {
	var ce *httpadapter.ConfigError
	if !errors.As(err, &ce) {
		p.add("adapter", "%v", err)
		return
	}
	name, key, _ := strings.Cut(ce.Field, "[") // Headers["X-Key"], StatusOutcomes["409"]
	field, ok := configFields[name]
	if !ok {
		p.add("adapter", "%v", err)
		return
	}
	for _, had := range p.list {
		if had.Field == field {
			return
		}
	}
	if key != "" {
		p.add(field, "[%s: %s", key, ce.Reason)
		return
	}
	p.add(field, "%s", ce.Reason)
}

// checkFields reports template placeholders that are not arguments.
func (p *problems) checkFields(field string, tmpl *canon.Template, schema map[string]any) {
	for _, f := range tmpl.Fields() {
		if !schemaHasField(schema, f, "") {
			p.add(field, "placeholder {%s} is not a property of args_schema", f)
		}
	}
}

// schemaHasField reports whether the dotted path names a property of the
// object schema, of the given JSON type when typ is not "".
func schemaHasField(schema map[string]any, path, typ string) bool {
	cur := schema
	parts := strings.Split(path, ".")
	for i, part := range parts {
		props, _ := cur["properties"].(map[string]any)
		next, ok := props[part].(map[string]any)
		if !ok {
			return false
		}
		if i == len(parts)-1 {
			return typ == "" || next["type"] == typ
		}
		cur = next
	}
	return false
}
